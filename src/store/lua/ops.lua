-- ops.lua - the table of operations (A[1] names one) and the first of
-- them: version, init, submit (after task.lua).
--
local ops = {}

-- layout: how this script writes tasks and indexes (field names, index
-- members); a prefix written by an earlier development layout is refused
local LAYOUT = '5'
-- a sharded store (redis_shard.c) is N prefixes {due:NAME:i}, each
-- with shards=N in its meta; A[3] is the N the caller opened it with
local function version()
  local v = redis.call('HMGET', K('meta'), 'schema_version', 'layout', 'shards')
  if v[1] and (v[2] == '3' or v[2] == '3-4') then return -3 end
  if v[1] and v[2] == '4' then return -5 end
  if v[1] and v[2] ~= LAYOUT then return -2 end
  if v[1] and tonumber(v[3] or '1') ~= tonumber(A[3] or '1') then return -1000 - tonumber(v[3] or '1') end
  if v[1] then return tonumber(v[1]) end
  return nil
end
ops.version = function()
  local v = version()
  if v == nil then return -1 end
  return v
end

-- 4 -> 5 (issue 15): the metrics moved from the whole history's
-- counters (:m) to the minutes of the window (:mw:M); locks (:lock:N)
-- and the workers' `pruned` need nothing written before their use
-- layout 3 -> 4 (issue 39): the per-state sorted sets :st:<STATE>
-- become the bitmaps of sbit() (writes.lua), and the index of every
-- scheduled task (:due) and of the kinds with any (:dkinds) give way to
-- the kinds' heads (:dh, writes.lua).  Bounded steps: one call moves at
-- most 20,000 ids (ZPOPMIN, so a step that is cut short loses nothing:
-- what it popped is written by its flush) and answers -4 until none is
-- left; redis.c calls again.  The last step writes :dh (one member a
-- kind and priority in use) and drops :due (UNLINK: freed off the
-- script).  Layout '3-4' meanwhile refuses every build (an older one
-- would write the sets again).
-- A layout step refuses while a try runs under a live lease: no worker
-- of this build runs before the step, so it is one of the earlier
-- build's, whose script never looks at the layout again.  -10000 - the
-- number of such tries (redis.c names them), or nil.
local function live_leases()
  local live = redis.call('ZCOUNT', K('lease'), '(' .. I(now()), '+inf')
  if live > 0 then return -10000 - live end
  return nil
end
local function relayout()
  -- an earlier build's worker would go on writing layout 3's indexes
  -- into this one and strand what it touched
  if redis.call('HGET', K('meta'), 'layout') == '3' then
    local live = live_leases()
    if live then return live end
  end
  redis.call('HSET', K('meta'), 'layout', '3-4')
  local left = 20000
  for _, st in ipairs({'SCHEDULED', 'DONE', 'CANCELLED', 'DEAD'}) do
    local key = K('st', st)
    while left > 0 do
      local r = redis.call('ZPOPMIN', key, math.min(left, 5000))
      if #r == 0 then break end
      for j = 1, #r, 2 do sbit(st, r[j], '1') end
      left = left - #r / 2
      flush()
    end
    if left <= 0 then return false end
  end
  for _, kind in ipairs(redis.call('ZRANGE', K('dkinds'), 0, -1)) do
    for _, h in ipairs(heads(K('dk', kind))) do redis.call('ZADD', K('dh'), 0, h .. kind) end
  end
  redis.call('UNLINK', K('due'), K('dkinds'))
  redis.call('HSET', K('meta'), 'layout', LAYOUT)
  return true
end

ops.init = function()
  local v = version()
  -- layout 4 -> 5: nothing moves.  A DONE try's record stays in its task
  -- hash (end_attempt); layout 4's DONE tasks keep the record they have
  -- and readers take either.  But a process of the earlier build that
  -- keeps running would show a DONE task without its last try, prune one
  -- without taking its try out of the metrics, and not mark a late
  -- commit on it: as for layout 3, not under live leases (live_leases);
  -- the docs ask for every process of that build to be stopped
  if v == -5 then
    local live = live_leases()
    if live then return live end
    redis.call('HSET', K('meta'), 'layout', LAYOUT)
    v = version()
  end
  if v == -3 then
    local r = relayout()
    if type(r) == 'number' then return r end
    if not r then return -4 end
    v = version()
  end
  if v == 4 and tonumber(A[2]) >= 5 then
    redis.call('DEL', K('m'))
    redis.call('HSET', K('meta'), 'schema_version', '5')
    v = 5
  end
  -- 5 -> 6: nothing here (SQLite's running try moved into its task;
  -- here it always was)
  if v == 5 and tonumber(A[2]) >= 6 then
    redis.call('HSET', K('meta'), 'schema_version', '6')
    v = 6
  end
  -- 6 -> 7: nothing here (SQLite's indexes)
  if v == 6 and tonumber(A[2]) >= 7 then
    redis.call('HSET', K('meta'), 'schema_version', '7')
    v = 7
  end
  -- 7 -> 8: nothing here (the SQL stores' due_schedule routine)
  if v == 7 and tonumber(A[2]) >= 8 then
    redis.call('HSET', K('meta'), 'schema_version', '8')
    v = 8
  end
  -- 8 -> 9: nothing here (the SQL stores' due_reschedule routine)
  if v == 8 and tonumber(A[2]) >= 9 then
    redis.call('HSET', K('meta'), 'schema_version', '9')
    v = 9
  end
  -- 9 -> 10: nothing here (the SQL stores' routines gain on_key; the
  -- submit script's on_key needs nothing written)
  if v == 9 and tonumber(A[2]) >= 10 then
    redis.call('HSET', K('meta'), 'schema_version', '10')
    v = 10
  end
  -- 10 -> 11: nothing here (run after: a task hash without its fields
  -- reads as after_n = after_left = after_any_end = 0, row() and N())
  if v == 10 and tonumber(A[2]) >= 11 then
    redis.call('HSET', K('meta'), 'schema_version', '11')
    v = 11
  end
  if v ~= nil then return v end
  redis.call('HSET', K('meta'), 'schema_version', A[2], 'layout', LAYOUT)
  if tonumber(A[3] or '1') > 1 then redis.call('HSET', K('meta'), 'shards', A[3], 'shard', A[4]) end
  return tonumber(A[2])
end

-- submit: n, then n items of 14 arguments (submit_one) -> id, existed,
-- moved per item; or, before anything is written, a parent refused
-- (after_check)
ops.submit = function()
  local t, n, out, new = now(), tonumber(A[2]), {}, false
  for j = 0, n - 1 do
    if A[3 + j * 14 + 13] ~= '' then
      after_fns()
      local bad = after_check(n)
      if bad then return bad end
      break
    end
  end
  for j = 0, n - 1 do
    local id, ex, mv = submit_one(3 + j * 14, t, n - j)
    out[#out + 1] = id
    out[#out + 1] = ex
    out[#out + 1] = mv
    if ex == 0 or mv == 1 then new = true end
  end
  if new then wake() end
  return out
end
