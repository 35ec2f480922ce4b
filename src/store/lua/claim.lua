-- claim.lua - claim and complete, with the kinds' flow control (after
-- ops.lua).
--
-- flow control: the kinds' settings
local function flow_read()
  local f = {}
  for _, k in ipairs(redis.call('ZRANGE', K('kinds'), 0, -1)) do
    local v = redis.call('HMGET', K('kind', k), 'paused', 'rate_n', 'rate_us', 'max_running', 'max_running_per_group', 'timeout_us')
    local s = {kind = k, paused = N(v[1]) ~= 0, rate_n = N(v[2]), rate_us = N(v[3]), max_running = N(v[4]), per_group = N(v[5]), timeout_us = N(v[6])}
    s.limited = (not s.paused) and (s.rate_n > 0 or s.max_running > 0 or s.per_group > 0)
    f[k] = s
    f[#f + 1] = s
  end
  return f
end

-- Walk the lex index src (members prio|due|id) in (priority, due_at)
-- order, one priority at a time, taking due members that accept() admits
-- into out until need of them are taken, looking at no more than cap
-- members when accept() can refuse some.  Returns the number taken.
local function scan(src, t, need, out, accept, cap)
  flush(true)
  local lo, taken = '-', 0
  local seen = 0
  cap = cap or math.huge
  while taken < need and seen < cap do
    local first = redis.call('ZRANGEBYLEX', src, lo, '+', 'LIMIT', 0, 1)
    if #first == 0 then break end
    local p = string.sub(first[1], 1, 2)
    local off, chunk = 0, need - taken
    if accept then chunk = math.min(math.max(chunk, 64), cap - seen) end
    while taken < need and seen < cap do
      local got = redis.call('ZRANGEBYLEX', src, '[' .. p, upto(p, t), 'LIMIT', off, chunk)
      for _, m in ipairs(got) do
        if taken == need or seen == cap then break end
        seen = seen + 1
        if not accept or accept(m) then out[#out + 1] = m taken = taken + 1 end
      end
      if #got < chunk then break end
      off = off + chunk
    end
    lo = '(' .. p .. FF16
  end
  return taken
end

-- the call's kinds' settings (flow_read), for take (ops.claim sets it)
local FLOW
-- Claim task id at time t (re-checks SCHEDULED and due): its claim row,
-- or nil.  A claim row is the id, then the hash's fields as read before
-- the claim, then the kind's time limit ('z') when the task has none of
-- its own; the caller knows what the claim changed (redis.c's ccur).
local function take(id, t, owner, lease)
  local sid = I(id)
  local tk = T(sid)
  local h = redis.call('HGETALL', tk)
  local st, due, kind, prio, att, grp, z
  for j = 1, #h, 2 do
    local f = h[j]
    if f == 's' then st = h[j + 1] elseif f == 'd' then due = h[j + 1]
    elseif f == 'k' then kind = h[j + 1] elseif f == 'a' then att = h[j + 1]
    elseif f == 'q' then prio = h[j + 1] elseif f == 'g' then grp = h[j + 1]
    elseif f == 'z' then z = true end
  end
  due = N(due)
  if st ~= 'SCHEDULED' or due > t then return nil end
  idx_del(id, kind, N(prio), due)
  local na, lu = N(att) + 1, t + lease
  local sa, slu, stt = I(na), I(lu), I(t)
  redis.call('HSET', tk, 's', 'CLAIMED', 'a', sa, 'w', owner, 'l', slu, 'u', stt, 'n', stt)
  move(sid, kind, 'SCHEDULED', 'CLAIMED')
  lease_set(sid, kind, grp, slu)
  local late, m = t - due, mw(t)
  zadd(KLAT, stt, I(late) .. ':' .. sid .. ':' .. sa)
  hincr(m, 'out:RUNNING', 1)
  hincr(m, hfield('late', late), 1)
  hincr(m, 'late_sum', late)
  local k = FLOW[kind]
  if not z and k and k.timeout_us > 0 then h[#h + 1] = 'z' h[#h + 1] = I(k.timeout_us) end
  table.insert(h, 1, sid)
  return h
end

local HELD_RATE, HELD_RUNNING, HELD_GROUP = 1, 2, 4

-- room of limited kind k for at most `left` claims: room, why, oldest
local function kind_room(k, t, left)
  flush(true)
  local room, why, oldest = left, 0, 0
  if k.max_running > 0 then
    local n = redis.call('ZCOUNT', K('lk', k.kind), t, '+inf')
    if k.max_running - n < room then room = k.max_running - n why = HELD_RUNNING end
  end
  if k.rate_n > 0 then
    redis.call('ZREMRANGEBYSCORE', K('rate', k.kind), '-inf', t - k.rate_us)
    local n = redis.call('ZCARD', K('rate', k.kind))
    if n > 0 then oldest = tonumber(redis.call('ZRANGE', K('rate', k.kind), 0, 0, 'WITHSCORES')[2]) end
    if k.rate_n - n < room then room = k.rate_n - n why = HELD_RATE end
  end
  if room < 0 then room = 0 end
  return room, why, oldest
end

local function kind_after(st, k, t, taken, held, oldest, ids)
  if k.rate_n > 0 then
    for _, id in ipairs(ids) do redis.call('ZADD', K('rate', k.kind), t, I(t) .. ':' .. id) end
  end
  if held == 0 then return end
  local retry = 0
  if bit.band(held, HELD_RATE) ~= 0 then
    if oldest == 0 then oldest = t end
    retry = oldest + k.rate_us - t
  end
  if bit.band(held, HELD_RUNNING + HELD_GROUP) ~= 0 and (retry == 0 or retry > 100000) then retry = 100000 end
  if retry < 1000 then retry = 1000 end
  if st.retry == 0 or retry < st.retry then st.retry = retry end
  local kk = K('kind', k.kind)
  if bit.band(held, HELD_RATE) ~= 0 then redis.call('HINCRBY', kk, 'held_rate', 1) end
  if bit.band(held, HELD_RUNNING) ~= 0 then redis.call('HINCRBY', kk, 'held_running', 1) end
  if bit.band(held, HELD_GROUP) ~= 0 then redis.call('HINCRBY', kk, 'held_group', 1) end
end

-- group admission for a limited kind with max_running_per_group
local function group_gate(k, t, st)
  local counts = {}
  return function(m)
    if k.per_group == 0 then return true end
    local g = tcall('HGET', T(mid(m)), 'grp')
    if not g then return true end
    local c = counts[g]
    if not c then flush(true) c = redis.call('ZCOUNT', K('lg', lq(k.kind) .. g), t, '+inf') end
    if c >= k.per_group then st.held = bit.bor(st.held, HELD_GROUP) counts[g] = c return false end
    counts[g] = c + 1
    return true
  end
end

local function claim_limited(st, k, t, owner, lease, limit, rows)
  local room, why, oldest = kind_room(k, t, limit - #rows)
  st.held = 0
  local picked = {}
  -- a kind with per-group limits looks at no more than room + 1000
  -- members (the MySQL store's GROUP_SCAN): a claim is bounded however
  -- many due tasks of full groups lie ahead; those it refused set the
  -- held flag, so the worker polls again at retry_in
  local n = scan(kdk(k.kind), t, room + 1, picked, group_gate(k, t, st), room + 1001)
  if n > room then
    picked[#picked] = nil
    st.held = bit.bor(st.held, why)
  end
  local ids = {}
  for _, m in ipairs(picked) do
    local r = take(mid(m), t, owner, lease)
    if r then rows[#rows + 1] = r ids[#ids + 1] = mid(m) end
  end
  kind_after(st, k, t, #ids, st.held, oldest, ids)
end

-- The due members of every admitted kind in (priority, due_at, id)
-- order, at most need: per priority in use (a loose index scan of :dh),
-- the first need admitted kinds whose head of that priority is due (any
-- task among the first need is of one of them: its kind's head comes no
-- later), merged.  The j-th kind can give at most need - j + 1 of them
-- (the j - 1 heads before its own come first); once 2 × need are read
-- they are cut to the first need, and the last of those bounds what a
-- later kind can give (none once its head is past it): with many kinds
-- due at once a claim reads about need × (1 + log kinds), not need ×
-- kinds.
local function due_scan(t, need, out, admits)
  flush(true)
  local lo, taken = '-', 0
  while taken < need do
    local first = redis.call('ZRANGEBYLEX', KDH, lo, '+', 'LIMIT', 0, 1)
    if #first == 0 then break end
    local p, left = string.sub(first[1], 1, 2), need - taken
    local kinds, heads, off = {}, {}, 0
    while #kinds < left do
      local hs = redis.call('ZRANGEBYLEX', KDH, '[' .. p, upto(p, t), 'LIMIT', off, 64)
      for _, h in ipairs(hs) do
        local kind = string.sub(h, 19)
        if admits(kind) then
          local dk = kdk(kind)
          kinds[#kinds + 1] = dk
          heads[#heads + 1] = string.sub(h, 1, 18)
          if not DHINT[dk] then DHINT[dk] = {} end
          DHINT[dk][p] = heads[#heads]
          if #kinds == left then break end
        end
      end
      if #hs < 64 then break end
      off = off + 64
    end
    local cand, thr, hi = {}, nil, upto(p, t)
    for j, dk in ipairs(kinds) do
      if thr and not mless(heads[j], thr) then break end
      for _, m in ipairs(redis.call('ZRANGEBYLEX', dk, '[' .. p, hi, 'LIMIT', 0, left - j + 1)) do
        cand[#cand + 1] = m
      end
      if #cand >= 2 * left and j < #kinds then
        table.sort(cand, mless)
        for k = #cand, left + 1, -1 do cand[k] = nil end
        thr, hi = cand[left], '(' .. cand[left]
      end
    end
    if #kinds > 1 then table.sort(cand, mless) end
    for j = 1, math.min(left, #cand) do out[#out + 1] = cand[j] end
    taken = taken + math.min(left, #cand)
    lo = '(' .. p .. FF16
  end
  return taken
end

local function claim_rest(f, filt, t, owner, lease, limit, rows)
  local need = limit - #rows
  if need <= 0 then return end
  local picked = {}
  due_scan(t, need, picked, function(kind)
    local k = f[kind]
    return filt.admits(kind) and not (k and (k.paused or k.limited))
  end)
  for j = 1, #picked do
    local r = take(mid(picked[j]), t, owner, lease)
    if r then rows[#rows + 1] = r end
  end
end

local function claim_id(f, st, t, owner, lease, id, rows)
  local v = tcall('HMGET', T(id), 'state', 'due_at', 'kind', 'grp')
  if v[1] ~= 'SCHEDULED' or N(v[2]) > t then return end
  local k = f[v[3]]
  if k and k.paused then return end
  if k and k.limited then
    local room, why, oldest = kind_room(k, t, 1)
    if room > 0 and k.per_group > 0 and v[4] and redis.call('ZCOUNT', K('lg', lq(k.kind) .. v[4]), t, '+inf') >= k.per_group then
      room, why = 0, HELD_GROUP
    end
    if room == 0 then kind_after(st, k, t, 0, why, oldest, {}) return end
    local r = take(id, t, owner, lease)
    if r then rows[#rows + 1] = r kind_after(st, k, t, 1, 0, oldest, {id}) end
    return
  end
  local r = take(id, t, owner, lease)
  if r then rows[#rows + 1] = r end
end

-- complete one try; 'D' done, 'C' cancelled before commit, 'S' stale
local function complete_one(id, att, result, t)
  local tk = T(id)
  -- (the hot path names the fields by their letters, as tcall would)
  local v = redis.call('HMGET', tk, 's', 'a', 'x', 'k', 'y', 'g', 'w', 'n', 'd', 'e')
  if v[1] == 'CLAIMED' and N(v[2]) == att then
    lease_del(id, v[4], v[6])
    if N(v[3]) == 0 then
      -- layout 5: 'w', 'l' and 'n' stay (row() shows no lease but on a
      -- CLAIMED task; 'w', 'n', 'd', 'u' are the try's DONE record, so
      -- end_attempt writes none; a try claimed by layout 3 has no 'n'
      -- and keeps its record, which readers take first)
      if v[10] then redis.call('HDEL', tk, 'e') end
      redis.call('HSET', tk, 's', 'DONE', 'r', result, 'u', I(t))
      finish(id, v[4], v[5], 'CLAIMED', 'DONE', t)
      end_attempt(id, att, t, 'DONE', nil, v[7], v[8], v[9], true)
      return 'D'
    end
    tcall('HDEL', tk, 'lease_owner', 'lease_until', 'n')
    tcall('HSET', tk, 'state', 'CANCELLED', 'updated_at', I(t))
    finish(id, v[4], v[5], 'CLAIMED', 'CANCELLED', t)
    end_attempt(id, att, t, 'CANCELLED', 'cancel requested before commit', v[7], v[8], v[9])
    return 'C'
  end
  mark_late(id, att)
  return 'S'
end

local function complete_items(i, n, t)
  local out = {}
  for j = 0, n - 1 do
    out[#out + 1] = complete_one(A[i + j * 3], tonumber(A[i + j * 3 + 1]), A[i + j * 3 + 2], t)
  end
  return table.concat(out)
end

ops.complete = function()
  return complete_items(3, tonumber(A[2]), now())
end

-- claim: owner lease limit only_id exclude n_kinds kinds... n_comp comps...
ops.claim = function()
  local t = now()
  local owner, lease, limit, only = A[2], tonumber(A[3]), tonumber(A[4]), tonumber(A[5])
  local exclude, nk = A[6] == '1', tonumber(A[7])
  local set = {}
  for j = 1, nk do set[A[7 + j]] = true end
  local nc = tonumber(A[8 + nk])
  local outcomes = complete_items(9 + nk, nc, t)
  local filt = {any = nk > 0, admits = function(kind)
    if nk == 0 then return true end
    if set[kind] then return not exclude end
    return exclude
  end}
  local f = flow_read()
  FLOW = f
  for _, k in ipairs(f) do if k.paused or k.limited then f.blocked = true end end
  local st, rows = {retry = 0, held = 0}, {}
  if limit > 0 then
    if only > 0 then
      claim_id(f, st, t, owner, lease, only, rows)
    else
      for _, k in ipairs(f) do
        if #rows < limit and k.limited and filt.admits(k.kind) then
          claim_limited(st, k, t, owner, lease, limit, rows)
        end
      end
      claim_rest(f, filt, t, owner, lease, limit, rows)
    end
  end
  return {st.retry, outcomes, rows, I(t)}
end
