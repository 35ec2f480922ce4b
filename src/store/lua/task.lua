-- task.lua - one task's bookkeeping (after writes.lua): its indexes,
-- state counters and leases, its attempt records and row, a new id,
-- one submitted item.
--
-- the due indexes of a SCHEDULED task
local function idx_add(id, kind, prio, due)
  local m, dk = mem(prio, due, id), kdk(kind)
  DK[dk] = kind
  zadd(dk, '0', m)
end
local function idx_del(id, kind, prio, due)
  local m, dk = mem(prio, due, id), kdk(kind)
  DK[dk] = kind
  zrem(dk, m)
end
-- the per-state bitmaps (sbit) and the (state, kind) counters; CLAIMED
-- has no bitmap: :lease holds exactly the CLAIMED ids (lease_set/lease_del
-- go with every move into and out of CLAIMED)
local function move(id, kind, from, to)
  if from then
    if from ~= 'CLAIMED' then sbit(from, id, '0') end
    hincr(KKC, from .. ':' .. kind, -1)
  end
  if to then
    if to ~= 'CLAIMED' then sbit(to, id, '1') end
    hincr(KKC, to .. ':' .. kind, 1)
  end
end
-- :lk:<kind> (leases of one kind) is kept only for a kind with
-- max_running, the one reader that needs it at claim time; kind_put
-- builds it from :lease when the limit is set and drops it when removed
local LKM -- run() makes it empty
local function counted(kind)
  local c = LKM[kind]
  if c == nil then c = redis.call('HEXISTS', K('kind', kind), 'max_running') == 1 LKM[kind] = c end
  return c
end
local function lease_set(id, kind, grp, lu)
  zadd(KLEASE, lu, id)
  if counted(kind) then zadd(K('lk', kind), lu, id) end
  if grp then zadd(K('lg', lq(kind) .. grp), lu, id) end
end
local function lease_del(id, kind, grp)
  zrem(KLEASE, id)
  if counted(kind) then zrem(K('lk', kind), id) end
  if grp then zrem(K('lg', lq(kind) .. grp), id) end
end
local function key_release(id, kind, key)
  if key and redis.call('HGET', K('key'), lq(kind) .. key) == tostring(id) then
    redis.call('HDEL', K('key'), lq(kind) .. key)
  end
end
-- run after (after.lua): a parent's end releases or cancels the tasks
-- added after it (defined there; finish calls it)
local after_end
-- a task reaches DONE or CANCELLED (finished: prunable) or DEAD; one
-- that was waiting (SCHEDULED) waits for no parent any more
local function finish(id, kind, key, from, to, t)
  move(id, kind, from, to)
  key_release(id, kind, key)
  if from == 'SCHEDULED' then tcall('HDEL', T(id), 'after_left') end
  if to ~= 'DEAD' then zadd(KFIN, t, id) end
  done_wake()
  after_end(id, to, t)
end
-- A try's attempt record is written once, when the try ends (layout
-- 4): while it runs, the task hash holds what the record will say
-- (owner 'w', claim time 'n', due_at 'd'), and readers make the
-- RUNNING record from it.  The caller has checked that the task is
-- CLAIMED at attempt att, so a try ends once.  w, n, d are the task's
-- fields; n is nil for a try claimed by layout 3, whose record was
-- written at the claim.  Layout 5: a try that ends DONE writes no record
-- at all (`kept`): the task hash keeps 'w' and 'n' beside 'd', and its
-- 'u' is the end, so readers (attempts(), mark_late) make the DONE
-- record from it as they make the RUNNING one.  A DONE task is never
-- written again (prune deletes it), so that record cannot change.
-- (the done-per-second field of the last end's time: a call's ends share
-- it)
local DPM_T, DPM_F
local function end_attempt(id, att, t, outcome, err, w, n, due, kept)
  if not (n and kept) then
    local ak, f = K('a', id), I(att) .. ':'
    if n then
      local h = {f .. 'ended_at', I(t), f .. 'outcome', outcome, f .. 'worker', w or '', f .. 'claimed_at', n, f .. 'due_at', due}
      if err then h[11] = f .. 'error' h[12] = err end
      redis.call('HSET', ak, unpack(h))
    else
      n = redis.call('HGET', ak, f .. 'claimed_at')
      if not n then return end
      local h = {f .. 'ended_at', I(t), f .. 'outcome', outcome}
      if err then h[5] = f .. 'error' h[6] = err end
      redis.call('HSET', ak, unpack(h))
    end
  end
  local c = N(n)
  local d, m = t - c, mw(c)
  hincr(m, 'out:RUNNING', -1)
  hincr(m, 'out:' .. outcome, 1)
  hincr(m, hfield('dur', d), 1)
  hincr(m, 'dur_sum', d)
  if outcome == 'DONE' then
    if t ~= DPM_T then DPM_T, DPM_F = t, string.format('%d', math.floor(t / 1000000)) end
    hincr(KDPM, DPM_F, 1)
  end
end
-- the claim time of try att of task id, from its record or (the DONE
-- try of layout 5) from the task hash
local function claimed_at(id, att)
  local c = redis.call('HGET', K('a', id), att .. ':claimed_at')
  if c then return c end
  local v = redis.call('HMGET', T(id), 's', 'a', 'n')
  if v[3] and v[1] == 'DONE' and N(v[2]) == tonumber(att) then return v[3] end
  return nil
end
local function mark_late(id, att)
  local ak = K('a', id)
  local c = claimed_at(id, att)
  if c and redis.call('HSETNX', ak, att .. ':late_commit', 'REJECTED_STALE') == 1 then
    hincr(mw(N(c)), 'stale', 1)
  end
end
local function backoff(b, cap, n)
  if b <= 0 then return 0 end
  local d = b
  for _ = 2, n do if d >= cap then return cap end d = d * 2 end
  if d < cap then return d end
  return cap
end
-- A task hash leaves out what it can rebuild: its id (in the key), the
-- fields whose value is 0 (attempt, attempt_base, cancel_requested,
-- backoff_us, backoff_cap_us, priority) and updated_at while it equals
-- created_at; row() puts them back, so the decoders see every column.
local TI, FI = {}, {}
for j = 1, #TC do local c = TC[j] TI[c] = j FI[F[c] or c] = j end -- no ipairs at load
local DEF0 = {'attempt', 'attempt_base', 'cancel_requested', 'backoff_us', 'backoff_cap_us', 'priority',
  'after_n', 'after_left', 'after_any_end'}
-- (HGETALL reads the hash's listpack once; HMGET of every column
-- searched it once per column)
local function row(id)
  local h, r = redis.call('HGETALL', T(id)), ROW0()
  for j = 1, #h, 2 do local c = FI[h[j]] if c then r[c] = h[j + 1] end end
  if r[TI.state] then
    r[TI.id] = I(tonumber(id))
    for _, c in ipairs(DEF0) do if not r[TI[c]] then r[TI[c]] = '0' end end
    if not r[TI.updated_at] then r[TI.updated_at] = r[TI.created_at] end
    -- a DONE task keeps its last owner and lease end (layout 5): the
    -- record of its try, not a lease
    if r[TI.state] ~= 'CLAIMED' then r[TI.lease_owner], r[TI.lease_until] = false, false end
  end
  return r
end
-- the attempt records of task id's n tries; the last one, when it has
-- no record (written at its end), is in the task hash: RUNNING while the
-- task is CLAIMED (end_attempt), DONE (layout 5: its 'u' is the end)
local function attempts(id, n)
  local out = {}
  local ak = K('a', id)
  for a = 1, n do
    local f = a .. ':'
    local v = redis.call('HMGET', ak, f .. 'worker', f .. 'claimed_at', f .. 'due_at', f .. 'ended_at', f .. 'outcome', f .. 'error', f .. 'late_commit')
    if v[1] then out[#out + 1] = {id, a, v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
    elseif a == n then
      local r = redis.call('HMGET', T(id), 's', 'w', 'n', 'd', 'u')
      if r[3] and r[1] == 'CLAIMED' then out[#out + 1] = {id, a, r[2] or '', r[3], r[4], false, 'RUNNING', false, false}
      elseif r[3] and r[1] == 'DONE' then out[#out + 1] = {id, a, r[2] or '', r[3], r[4], r[5], 'DONE', false, v[7]} end
    end
  end
  return out
end

-- a task id: seq * N + i in shard i of N (redis_shard.c routes an id
-- to shard id mod N); the seq itself on one store
local SHN, SHI
local function shards()
  if not SHN then
    local m = redis.call('HMGET', K('meta'), 'shards', 'shard')
    SHN, SHI = tonumber(m[1] or '1'), tonumber(m[2] or '0')
  end
end
-- A batch's ids are reserved with one INCRBY (the items left in the
-- script, `want`) instead of one INCR a task; an id reserved and not
-- used (an item whose key names a live task) is a gap, as in a SQL
-- sequence.  The reservation is written before any task that uses it,
-- so a script stopped half-way leaves no id to be handed out twice.
local SEQ_NEXT, SEQ_END -- 1, 0 (run())
local function new_id(want)
  shards()
  if SEQ_NEXT > SEQ_END then
    want = math.max(want or 1, 1)
    SEQ_END = redis.call('INCRBY', K('seq'), I(want))
    SEQ_NEXT = SEQ_END - want + 1
  end
  local s = SEQ_NEXT
  SEQ_NEXT = s + 1
  return s * SHN + SHI
end

-- A SCHEDULED task moves to due (ds: the same as a string, a given time
-- kept as sent) and takes payload unless it is nil: its due indexes and
-- fields.  The caller has checked that it is SCHEDULED (in the script
-- that calls this) and wakes the workers: reschedule, a submit's on_key.
local function due_move(id, kind, prio, old, due, ds, payload, t)
  idx_del(id, kind, prio, old)
  local h = {'due_at', ds, 'updated_at', I(t)}
  if payload then h[5], h[6] = 'payload', payload end
  tcall('HSET', T(id), unpack(h))
  idx_add(id, kind, prio, due)
end

-- Run after (issue 38, docs/internals/redis.md "Run after").  A held
-- task is SCHEDULED with after_left > 0 parents to wait for, due_at
-- HELD (DUE_TIME_LAST: as a string, past a double's exact integers, and
-- never computed with) and in no due index; after_at and after_delay_us
-- keep the time it asked for, applied at its release.  Edges: :ac:P,
-- the set of P's waiting children (in P's shard), and :ap:C, C's
-- parents scored by id (in C's shard, for get).  A sharded store's
-- messages between shards go through each shard's outbox :ob
-- (after.lua); `outboxed` says this script wrote to it (dispatch.lua
-- tells redis.c, which tells redis_shard.c to forward them).
local outboxed
-- defined by after_fns() (after.lua) on the first call that needs them,
-- not by every script run (each function a run defines costs it)
local after_fns, after_link, after_check, held_move

-- submit one item at A[i..i+13] (left: the items of the script from this
-- one on, for new_id); returns id, existed, moved.
-- A[i+12] is after_any_end ('1'), A[i+13] the parents (after_link).
-- A[i+11] is on_key (keep, replace, later; '' reads as keep) for an item
-- whose key is held by the live task ex: keep answers ex; replace moves a
-- waiting ex to this item's due time and payload, later only to a
-- strictly later time; a running ex is not touched but gives up the key
-- (its 'key' field goes: its finish, retry or expiry releases nothing,
-- key_release checks the mapping's id too) and this item makes the new
-- task that holds it.  The state and due time are read and written in
-- this script, so a racing submit or claim sees all of it or none.  On a
-- sharded store (redis_shard.c) a keyed item goes to the shard of
-- hash(kind, key), where the holder was made (a task never moves shard),
-- so the holder, the key mapping and the new task are all in this
-- script's shard: one script does all of it atomically.
local function submit_one(i, t, left)
  local kind, due = A[i], nil
  if A[i + 2] ~= '' then due = tonumber(A[i + 2]) else due = t + tonumber(A[i + 3]) end
  local ds = A[i + 2] ~= '' and A[i + 2] or I(due)
  local key, grp = opt(A[i + 7]), opt(A[i + 9])
  if key then
    local ex = redis.call('HGET', K('key'), lq(kind) .. key)
    if ex then
      local on = A[i + 11]
      if on ~= 'replace' and on ~= 'later' then return tonumber(ex), 1, 0 end
      local hid = tonumber(ex)
      local v = tcall('HMGET', T(hid), 'state', 'priority', 'due_at')
      if v[1] == 'SCHEDULED' and N(tcall('HGET', T(hid), 'after_left')) > 0 then
        after_fns()
        return hid, 1, held_move(hid, on, A[i + 2], A[i + 3], due, A[i + 1], t)
      end
      if v[1] == 'SCHEDULED' then
        if on == 'later' and not (N(v[3]) < due) then return hid, 1, 0 end
        due_move(hid, kind, N(v[2]), N(v[3]), due, ds, A[i + 1], t)
        return hid, 1, 1
      end
      if v[1] ~= 'CLAIMED' then return hid, 1, 0 end
      tcall('HDEL', T(hid), 'key')
      tcall('HSET', T(hid), 'updated_at', I(t))
    end
  end
  local id = new_id(left)
  -- (the client writes numbers with %lld: a 0 is '0', read without
  -- tonumber's strtod)
  local prio = N(A[i + 8])
  -- a given due time is kept as sent: a Lua number (a double) holds
  -- microseconds exactly only to 2^53 (year 2255), and the index's
  -- order needs no more
  -- (the fields by their letters, F: the hot path skips tcall's mapping)
  local h = {'k', kind, 'p', A[i + 1], 's', 'SCHEDULED', 'd', ds, 'm', A[i + 4], 't', I(t)}
  if N(A[i + 5]) ~= 0 then h[#h + 1] = 'o' h[#h + 1] = A[i + 5] end
  if N(A[i + 6]) ~= 0 then h[#h + 1] = 'c' h[#h + 1] = A[i + 6] end
  if prio ~= 0 then h[#h + 1] = 'q' h[#h + 1] = A[i + 8] end
  if key then h[#h + 1] = 'y' h[#h + 1] = key redis.call('HSET', K('key'), lq(kind) .. key, id) end
  if grp then h[#h + 1] = 'g' h[#h + 1] = grp end
  if N(A[i + 10]) > 0 then h[#h + 1] = 'z' h[#h + 1] = A[i + 10] end
  local left = 0
  if A[i + 13] ~= '' then after_fns() left = after_link(id, i, h) end
  redis.call('HSET', T(id), unpack(h))
  if left == 0 then idx_add(id, kind, prio, due) end
  move(id, kind, nil, 'SCHEDULED')
  return id, 0, 0
end
