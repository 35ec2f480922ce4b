-- cold.lua - every other operation, defined by cold() (after try.lua).
--
-- The operations below are not on a worker's per-task path: their
-- functions are defined only when one of them is called (defining
-- every function costs each EVALSHA tens of microseconds).
local function cold()
  after_fns()
  ops.cancel = function()
    local t, id = now(), tonumber(A[2])
    local tk = T(id)
    local v = tcall('HMGET', tk, 'state', 'kind', 'key', 'priority', 'due_at', 'after_left')
    if not v[1] then return 'NONE' end
    if v[1] == 'SCHEDULED' then
      if N(v[6]) == 0 then idx_del(id, v[2], N(v[4]), N(v[5])) end
      tcall('HSET', tk, 'state', 'CANCELLED', 'updated_at', I(t))
      finish(id, v[2], v[3], 'SCHEDULED', 'CANCELLED', t)
    elseif v[1] == 'CLAIMED' then
      tcall('HSET', tk, 'cancel_requested', 1, 'updated_at', I(t))
    end
    return v[1]
  end

  -- reschedule (issue 38): id, at ('' for none), delay, '1' with the
  -- payload after it -> the state found; a SCHEDULED task moves in its
  -- due indexes to at, or the script's TIME + delay (the store's clock),
  -- and listeners are woken.  Anything else is reported, not written.
  ops.reschedule = function()
    local t, id = now(), tonumber(A[2])
    local v = tcall('HMGET', T(id), 'state', 'kind', 'priority', 'due_at', 'after_left')
    if not v[1] then return 'NONE' end
    if v[1] ~= 'SCHEDULED' then return v[1] end
    -- a held task keeps waiting: the time is its own, for its release
    if N(v[5]) > 0 then
      held_move(id, 'replace', A[3], A[4], 0, A[5] == '1' and A[6] or nil, t)
      return 'SCHEDULED'
    end
    local due, ds = t + tonumber(A[4]), nil
    if A[3] ~= '' then due, ds = tonumber(A[3]), A[3] else ds = I(due) end
    local p = nil
    if A[5] == '1' then p = A[6] end
    due_move(id, v[2], N(v[3]), N(v[4]), due, ds, p, t)
    wake()
    return 'SCHEDULED'
  end

  ops.get = function()
    local id = tonumber(A[2])
    local r = row(id)
    if not r[1] then return {} end
    local ps = {}
    if N(r[TI.after_n]) > 0 then ps = redis.call('ZRANGE', K('ap', I(id)), 0, -1) end
    return {r, attempts(id, N(r[6])), ps}
  end

  -- the next n ids after `after`: of one state's index, or, for every
  -- state, the n smallest of the five indexes' next n (no index of all
  -- ids: it would cost one more entry per task)
  -- the CLAIMED ids after `after`, from :lease (scored by lease_until,
  -- so every member is read: as many as tries in flight)
  local function claimed_ids(after, all)
    for _, id in ipairs(redis.call('ZRANGE', K('lease'), 0, -1)) do
      if tonumber(id) > after then all[#all + 1] = tonumber(id) end
    end
  end
  -- the ids of state (not CLAIMED) after `after`, at most n, ascending:
  -- the chunks in use from the one holding after + 1, each bitmap read
  -- whole (SB / 8 bytes) and its set bits taken in order
  local function state_ids(state, after, n, out)
    local c0, got, kb = math.floor((after + 1) / SB), 0, P .. ':sb:' .. state .. ':'
    while got < n do
      local cs = redis.call('ZRANGEBYSCORE', K('sc', state), I(c0), '+inf', 'LIMIT', 0, 8)
      for _, cm in ipairs(cs) do
        local c = tonumber(cm)
        local s = redis.call('GET', kb .. cm) or ''
        for i = 1, math.min(#s, SB / 8) do
          local byte = string.byte(s, i)
          if byte ~= 0 then
            for j = 0, 7 do
              local id = c * SB + (i - 1) * 8 + j
              if id > after and bit.band(byte, bit.rshift(128, j)) ~= 0 then
                out[#out + 1] = id
                got = got + 1
                if got == n then return end
              end
            end
          end
        end
        c0 = c + 1
      end
      if #cs < 8 then return end
    end
  end
  local function next_ids(state, after, n)
    local all = {}
    if state == '' or state == 'CLAIMED' then claimed_ids(after, all) end
    if state ~= 'CLAIMED' then
      for _, st in ipairs({'SCHEDULED', 'DONE', 'CANCELLED', 'DEAD'}) do
        if state == '' or state == st then state_ids(st, after, n, all) end
      end
    end
    table.sort(all)
    local out = {}
    for j = 1, math.min(n, #all) do out[j] = I(all[j]) end
    return out
  end

  -- list: state kind after limit attempts held -> {entries, last id
  -- looked at, more}; held: only SCHEDULED tasks with after_left > 0.  One call looks at no more than 1000 ids (a rare kind
  -- among millions must not block the server): more = 1 when it
  -- stopped there, and redis.c asks again after the last id.
  ops.list = function()
    local state, kind, after, limit, att = A[2], A[3], tonumber(A[4]), tonumber(A[5]), A[6] == '1'
    local held = A[7] == '1'
    if held then state = 'SCHEDULED' end
    local out, lo, seen, more = {}, after, 0, 0
    while #out < limit do
      local n = math.min(500, 1000 - seen)
      if n <= 0 then more = 1 break end
      local ids = next_ids(state, lo, n)
      for _, sid in ipairs(ids) do
        if #out == limit then break end
        seen, lo = seen + 1, tonumber(sid)
        if kind == '' or tcall('HGET', T(sid), 'kind') == kind then
          local r = row(sid)
          if r[1] and (state == '' or r[TI.state] == state) and (not held or N(r[TI.after_left]) > 0) then
            local e = {r}
            if att then e[2] = attempts(sid, N(r[6])) else e[2] = {} end
            out[#out + 1] = e
          end
        end
      end
      if #ids < n then break end
    end
    return {out, I(lo), more}
  end

  local function audit(id, t, action, detail)
    redis.call('RPUSH', K('audit', id), I(t) .. ' ' .. action .. ': ' .. detail)
  end

  ops.retry = function()
    local t, id = now(), tonumber(A[2])
    local tk = T(id)
    local v = tcall('HMGET', tk, 'state', 'kind', 'key', 'priority', 'attempt')
    if v[1] ~= 'DEAD' then return {'WRONG', v[1] or 'NONE'} end
    if v[3] then
      local ex = redis.call('HGET', K('key'), lq(v[2]) .. v[3])
      if ex and ex ~= tostring(id) then return {'CONFLICT'} end
      redis.call('HSET', K('key'), lq(v[2]) .. v[3], id)
    end
    tcall('HSET', tk, 'state', 'SCHEDULED', 'due_at', I(t), 'attempt_base', I(N(v[5])), 'cancel_requested', 0, 'updated_at', I(t))
    move(id, v[2], 'DEAD', 'SCHEDULED')
    idx_add(id, v[2], N(v[4]), t)
    audit(id, t, 'retry', 'DEAD -> SCHEDULED, fresh attempt budget')
    wake()
    return {'OK'}
  end

  ops.requeue = function()
    local t, id = now(), tonumber(A[2])
    local v = tcall('HMGET', T(id), unpack(TRY))
    if v[1] ~= 'CLAIMED' then return {'WRONG', v[1] or 'NONE'} end
    local tk = T(id)
    lease_del(id, v[4], v[6])
    tcall('HDEL', tk, 'lease_owner', 'lease_until', 'n')
    local ns = 'SCHEDULED'
    if N(v[3]) ~= 0 then ns = 'CANCELLED' end
    tcall('HSET', tk, 'state', ns, 'due_at', I(t), 'updated_at', I(t))
    if ns == 'SCHEDULED' then
      move(id, v[4], 'CLAIMED', 'SCHEDULED')
      idx_add(id, v[4], N(v[11]), t)
      wake()
    else
      finish(id, v[4], v[5], 'CLAIMED', 'CANCELLED', t)
    end
    end_attempt(id, N(v[2]), t, 'REQUEUED', 'requeue', v[13], v[14], v[15])
    audit(id, t, 'requeue', ns)
    return {'OK', ns}
  end

  ops.kill = function()
    local t, id = now(), tonumber(A[2])
    local tk = T(id)
    local v = tcall('HMGET', tk, unpack(TRY))
    local s = v[1]
    if s ~= 'SCHEDULED' and s ~= 'CLAIMED' and s ~= 'DEAD' then return {'WRONG', s or 'NONE'} end
    local ns = 'DEAD'
    if s == 'DEAD' or N(v[3]) ~= 0 then ns = 'CANCELLED' end
    local le = tcall('HGET', tk, 'last_error')
    local why = 'killed by operator'
    if s == 'DEAD' then why = 'dead letter dismissed by operator' end
    if le then why = le .. '; ' .. why end
    if s == 'SCHEDULED' and N(tcall('HGET', tk, 'after_left')) == 0 then
      idx_del(id, v[4], N(v[11]), N(tcall('HGET', tk, 'due_at')))
    elseif s == 'CLAIMED' then
      lease_del(id, v[4], v[6])
      tcall('HDEL', tk, 'lease_owner', 'lease_until', 'n')
    end
    tcall('HSET', tk, 'state', ns, 'last_error', why, 'updated_at', I(t))
    if s == 'DEAD' then
      move(id, v[4], 'DEAD', ns)
      redis.call('ZADD', K('fin'), t, id)
    else
      finish(id, v[4], v[5], s, ns, t)
    end
    if s == 'CLAIMED' then end_attempt(id, N(v[2]), t, 'KILLED', 'kill', v[13], v[14], v[15]) end
    audit(id, t, 'kill', ns)
    return {'OK', ns}
  end

  local STATES = {'SCHEDULED', 'CLAIMED', 'DONE', 'CANCELLED', 'DEAD'}

  -- tasks of lex due index src due at t; the oldest due_at of them or nil
  local function due_count(src, t)
    local n, oldest = 0, nil
    for _, h in ipairs(heads(src)) do
      local p = string.sub(h, 1, 2)
      n = n + redis.call('ZLEXCOUNT', src, '[' .. p, upto(p, t))
      local d = mdue(h)
      if d <= t and (not oldest or d < oldest) then oldest = d end
    end
    return n, oldest
  end

  -- every kind's tasks due at t (its heads in :dh say which kinds and
  -- priorities have any); the oldest due_at of them or nil
  local function due_all(t)
    local n, oldest = 0, nil
    for _, h in ipairs(redis.call('ZRANGE', KDH, 0, -1)) do
      local d = mdue(h)
      if d <= t then
        local p = string.sub(h, 1, 2)
        n = n + redis.call('ZLEXCOUNT', K('dk', string.sub(h, 19)), '[' .. p, upto(p, t))
        if not oldest or d < oldest then oldest = d end
      end
    end
    return n, oldest
  end

  ops.stats = function()
    local t = now()
    local out, cnt = {I(t)}, {}
    -- the per-state counts: the (state, kind) counters summed
    local kc = redis.call('HGETALL', K('kc'))
    for j = 1, #kc, 2 do
      local s = string.match(kc[j], '^(%u+):')
      if s then cnt[s] = (cnt[s] or 0) + tonumber(kc[j + 1]) end
    end
    for _, s in ipairs(STATES) do
      if s == 'CLAIMED' then out[#out + 1] = redis.call('ZCARD', K('lease'))
      else out[#out + 1] = cnt[s] or 0 end
    end
    local n, oldest = due_all(t)
    out[#out + 1] = n
    if oldest then out[#out + 1] = I(oldest) else out[#out + 1] = '' end
    local late = {}
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', K('lat'), I(t - tonumber(A[2])), '+inf')) do
      late[#late + 1] = string.match(m, '^(-?%d+):')
    end
    out[#out + 1] = late
    return out
  end

  -- the metrics counted from the tries of a task that is pruned: on the
  -- SQL stores they are aggregates of the attempt rows, which go with it
  -- (only a minute still kept: one past the window is not recreated)
  local function uncount(id, n)
    for _, a in ipairs(attempts(id, n)) do
      local claimed, due, ended, out = N(a[4]), N(a[5]), a[6], a[7]
      local late, m = claimed - due, mw(claimed)
      redis.call('ZREM', K('lat'), I(late) .. ':' .. id .. ':' .. a[2])
      if redis.call('EXISTS', m) == 1 then
        redis.call('HINCRBY', m, 'late:' .. bucket(late), -1)
        redis.call('HINCRBY', m, 'late_sum', -late)
        redis.call('HINCRBY', m, 'out:' .. out, -1)
        if a[9] then redis.call('HINCRBY', m, 'stale', -1) end
        if ended then
          local d = N(ended) - claimed
          redis.call('HINCRBY', m, 'dur:' .. bucket(d), -1)
          redis.call('HINCRBY', m, 'dur_sum', -d)
        end
      end
      if ended and out == 'DONE' then
        local sec = I(math.floor(N(ended) / 1000000))
        if redis.call('HEXISTS', K('dpm'), sec) == 1 and redis.call('HINCRBY', K('dpm'), sec, -1) <= 0 then redis.call('HDEL', K('dpm'), sec) end
      end
    end
  end

  -- prune: older_than_us limit -> {ids looked at, deleted}.  The oldest
  -- ends first (:fin is scored by end); each task's state is checked
  -- again: only DONE and CANCELLED go, with their history
  ops.prune = function()
    local cutoff, lim = now() - tonumber(A[2]), tonumber(A[3])
    local ids = redis.call('ZRANGEBYSCORE', K('fin'), '-inf', '(' .. I(cutoff), 'LIMIT', 0, lim)
    local n = 0
    for _, sid in ipairs(ids) do
      local v = tcall('HMGET', T(sid), 'state', 'kind')
      if v[1] == 'DONE' or v[1] == 'CANCELLED' or not v[1] then
        if v[1] then move(sid, v[2], v[1], nil) uncount(sid, N(tcall('HGET', T(sid), 'attempt'))) n = n + 1 end
        redis.call('DEL', T(sid), K('a', sid), K('audit', sid), K('ap', sid), K('ae', sid), K('ac', sid))
      end
      redis.call('ZREM', K('fin'), sid)
    end
    return {#ids, n}
  end

  -- lock_take: name owner ttl_us -> 1 held (taken, renewed), 0 not
  -- (another owner's lease runs: nothing written)
  ops.lock_take = function()
    local t, lk, o = now(), K('lock', A[2]), A[3]
    local v = redis.call('HMGET', lk, 'owner', 'until')
    if v[1] and v[1] ~= o and N(v[2]) >= t then return 0 end
    redis.call('HSET', lk, 'owner', o, 'until', I(t + tonumber(A[4])))
    return 1
  end

  -- schedules
  local SDEF = {'expr', 'kind', 'tz', 'payload', 'misfire', 'overlap', 'max_attempts', 'backoff_us', 'backoff_cap_us', 'next_slot'}
  ops.cron_get = function()
    local ck = K('c', A[2])
    if redis.call('EXISTS', ck) == 0 then return {} end
    return {redis.call('HMGET', ck, unpack(SC))}
  end
  ops.cron_list = function()
    local out = {}
    for _, n in ipairs(redis.call('ZRANGE', K('crons'), 0, -1)) do
      out[#out + 1] = redis.call('HMGET', K('c', n), unpack(SC))
    end
    return out
  end
  ops.cron_put = function()
    local t, name = now(), A[2]
    local ck = K('c', name)
    local h = {'name', name, 'updated_at', I(t)}
    for j, c in ipairs(SDEF) do h[#h + 1] = c h[#h + 1] = A[2 + j] end
    if redis.call('EXISTS', ck) == 0 then
      for _, x in ipairs({'created_at', I(t), 'fired', 0, 'missed', 0}) do h[#h + 1] = x end
    end
    redis.call('HSET', ck, unpack(h))
    redis.call('ZADD', K('crons'), 0, name)
    return 1
  end
  ops.cron_remove = function()
    local n = redis.call('DEL', K('c', A[2]))
    redis.call('ZREM', K('crons'), A[2])
    return n
  end
  -- cron_fire: name expect next slot missed last_missed has_task [item]
  ops.cron_fire = function()
    local t, ck = now(), K('c', A[2])
    local cur = redis.call('HGET', ck, 'next_slot')
    if not cur or cur ~= A[3] then return {0, 0} end
    redis.call('HSET', ck, 'next_slot', A[4], 'updated_at', I(t))
    local id = 0
    if A[8] == '1' then
      id = submit_one(9, t)
      redis.call('HSET', ck, 'last_slot', A[5], 'last_task', id)
      redis.call('HINCRBY', ck, 'fired', 1)
      wake()
    end
    local missed = tonumber(A[6])
    if missed > 0 then
      redis.call('HINCRBY', ck, 'missed', missed)
      if tonumber(A[7]) > 0 then redis.call('HSET', ck, 'last_missed', A[7]) end
    end
    return {1, id}
  end

  ops.metrics = function()
    local t = now()
    local kc = redis.call('HGETALL', K('kc'))
    -- the minutes that hold the tries claimed in the window A[2]
    local m, first = {}, math.floor((t - tonumber(A[2])) / 60000000)
    -- (and the next minute: a try dated ahead of this clock counts, as on
    -- the SQL stores, which bound the window from below only)
    for mi = first, math.floor(t / 60000000) + 1 do
      for _, x in ipairs(redis.call('HGETALL', KMW .. mi)) do m[#m + 1] = x end
    end
    local dpm = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
    local per = redis.call('HGETALL', K('dpm'))
    for j = 1, #per, 2 do
      local ago = t - tonumber(per[j]) * 1000000
      if ago >= 0 and ago < 900000000 then
        local i = math.floor(ago / 60000000) + 1
        dpm[i] = dpm[i] + tonumber(per[j + 1])
      end
    end
    local w = {0, 0, 0, 0, 0, 0, 0}
    for _, o in ipairs(redis.call('ZRANGEBYSCORE', K('workers'), I(t - 300000000), '+inf')) do
      local v = redis.call('HMGET', K('w', o), 'claim_queries', 'empty_claims', 'reclaim_queries', 'store_errors', 'pruned', 'lease_lost')
      w[1] = w[1] + 1
      for j = 1, 6 do w[j + 1] = w[j + 1] + N(v[j]) end
    end
    return {kc, m, dpm, w, redis.call('ZCARD', K('crons')), I(t - first * 60000000)}
  end

  ops.worker_report = function()
    local t, o = now(), A[2]
    local h = {'seen_at', I(t)}
    for j = 3, #A, 2 do h[#h + 1] = A[j] h[#h + 1] = A[j + 1] end
    -- started_at once: HSET answers how many fields were new, so a
    -- heartbeat is two commands, not three (an idle worker's budget)
    if redis.call('HSET', K('w', o), unpack(h)) > 0 then
      redis.call('HSETNX', K('w', o), 'started_at', I(t))
    end
    redis.call('ZADD', K('workers'), t, o)
    return 1
  end

  -- upcoming: until limit exclude n_kinds kinds...
  ops.upcoming = function()
    local t, until_, limit, exclude, nk = now(), A[2], tonumber(A[3]), A[4] == '1', tonumber(A[5])
    local set = {}
    for j = 1, nk do set[A[5 + j]] = true end
    -- the kinds' settings are read only once a member is found (an idle
    -- worker's safety poll of a store with nothing due in the horizon
    -- skips the ZRANGE of :kinds: one inner command fewer a call)
    local f
    local function paused(kind)
      if not f then f = flow_read() end
      return f[kind] and f[kind].paused
    end
    -- the kinds' own indexes, each (kind, priority) in use named by its
    -- head in :dh (the kinds of a list, or all but the excluded); up to
    -- limit + 1 members of each, merged by due_at.  One index is one
    -- kind, so a paused kind is left out whole (no task read)
    -- What is due already is a backlog the claims take in their order,
    -- without the wheel: at most UP_DUE of it a priority (enough to set
    -- the worker claiming), then the members due after now.  Before, a
    -- backlog of 26,000 due with 3,000 due later was read whole by every
    -- refill (20,000 members, then truncated at a past due_at, so the
    -- worker refilled at once): a drain of 3 tasks a second.
    local UP_DUE = 256
    local ut, nowb = be(math.max(tonumber(until_), 0)), be(math.max(t, 0)) .. FF8
    local cand, scanned, trunc = {}, 0, 0
    for _, h in ipairs(redis.call('ZRANGE', KDH, 0, -1)) do
      local kind, p = string.sub(h, 19), string.sub(h, 1, 2)
      -- (in the list, or out of it with exclude)
      if nk == 0 or (set[kind] == true) ~= exclude then
        local src = K('dk', kind)
        local got = redis.call('ZRANGEBYLEX', src, '[' .. p, '[' .. p .. nowb, 'LIMIT', 0, math.min(UP_DUE, limit + 1))
        if not (#got > 0 and paused(kind)) then
          for _, m in ipairs(got) do cand[#cand + 1] = m end
          scanned = scanned + #got
          local off, took = 0, #got
          while took <= limit do
            got = redis.call('ZRANGEBYLEX', src, '(' .. p .. nowb, '(' .. p .. ut, 'LIMIT', off, 500)
            if #got > 0 and paused(kind) then break end
            for _, m in ipairs(got) do
              if took <= limit then cand[#cand + 1] = m took = took + 1 end
            end
            scanned = scanned + #got
            if #got < 500 then break end
            if scanned >= 20000 then trunc = 1 break end
            off = off + 500
          end
        end
      end
    end
    table.sort(cand, function(a, b)
      local da, db = mdue(a), mdue(b)
      if da ~= db then return da < db end
      return mid(a) < mid(b)
    end)
    local out = {}
    for j = 1, #cand do
      if j > limit then trunc = 1 break end
      out[j] = {I(mid(cand[j])), I(mdue(cand[j]))}
    end
    local nx = redis.call('ZRANGE', K('lease'), 0, 0, 'WITHSCORES')
    return {I(t), nx[2] or '0', trunc, out}
  end

  -- kinds
  ops.kind_put = function()
    local t, kind = now(), A[2]
    local kk = K('kind', kind)
    if redis.call('EXISTS', kk) == 0 then
      redis.call('HSET', kk, 'kind', kind, 'paused', 0, 'held_rate', 0, 'held_running', 0, 'held_group', 0)
      redis.call('ZADD', K('kinds'), 0, kind)
    end
    local paused, rn, ru, mr, pg, to = tonumber(A[3]), tonumber(A[4]), A[5], tonumber(A[6]), tonumber(A[7]), tonumber(A[8])
    if paused >= 0 then redis.call('HSET', kk, 'paused', paused) end
    if rn == 0 then redis.call('HDEL', kk, 'rate_n', 'rate_us') elseif rn > 0 then redis.call('HSET', kk, 'rate_n', rn, 'rate_us', ru) end
    local had = redis.call('HEXISTS', kk, 'max_running') == 1
    if mr == 0 then redis.call('HDEL', kk, 'max_running') redis.call('DEL', K('lk', kind))
    elseif mr > 0 then
      redis.call('HSET', kk, 'max_running', mr)
      if not had then
        local lk, l = K('lk', kind), redis.call('ZRANGE', K('lease'), 0, -1, 'WITHSCORES')
        redis.call('DEL', lk)
        for j = 1, #l, 2 do
          if tcall('HGET', T(l[j]), 'kind') == kind then redis.call('ZADD', lk, l[j + 1], l[j]) end
        end
      end
    end
    if pg == 0 then redis.call('HDEL', kk, 'max_running_per_group') elseif pg > 0 then redis.call('HSET', kk, 'max_running_per_group', pg) end
    if to == 0 then redis.call('HDEL', kk, 'timeout_us') elseif to > 0 then redis.call('HSET', kk, 'timeout_us', A[8]) end
    redis.call('HSET', kk, 'updated_at', I(t))
    wake()
    return 1
  end

  local function kind_due(kind, t) return (due_count(K('dk', kind), t)) end

  -- kind_get: kind group(opt) ; kind_list
  local function kind_rows(names, grp, t)
    local out, run = {}, nil
    for _, kind in ipairs(names) do
      local kk = K('kind', kind)
      if redis.call('EXISTS', kk) == 1 then
        local r = redis.call('HMGET', kk, unpack(KC))
        local rate_us = N(redis.call('HGET', kk, 'rate_us'))
        local live = {0, 0, kind_due(kind, t), 0}
        if counted(kind) then live[1] = redis.call('ZCOUNT', K('lk', kind), t, '+inf')
        else
          if not run then
            run = {}
            for _, id in ipairs(redis.call('ZRANGEBYSCORE', K('lease'), t, '+inf')) do
              local k2 = tcall('HGET', T(id), 'kind')
              if k2 then run[k2] = (run[k2] or 0) + 1 end
            end
          end
          live[1] = run[kind] or 0
        end
        if rate_us > 0 then live[2] = redis.call('ZCOUNT', K('rate', kind), '(' .. I(t - rate_us), '+inf') end
        if grp then live[4] = redis.call('ZCOUNT', K('lg', lq(kind) .. grp), t, '+inf') end
        out[#out + 1] = {r, live}
      end
    end
    return out
  end
  ops.kind_get = function() return kind_rows({A[2]}, opt(A[3]), now()) end
  ops.kind_list = function() return kind_rows(redis.call('ZRANGE', K('kinds'), 0, -1), nil, now()) end
  ops.kind_remove = function()
    local n = redis.call('DEL', K('kind', A[2]))
    redis.call('ZREM', K('kinds'), A[2])
    redis.call('DEL', K('rate', A[2]), K('lk', A[2]))
    if n > 0 then wake() end
    return n
  end
end
