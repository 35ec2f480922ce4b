-- after.lua - run after (issue 38): a parent's end releases or cancels
-- the tasks added after it (after ops.lua; its fields and edges are
-- described above after_link there).
--
-- child c of parent p, which ended `how` (DONE, DEAD, CANCELLED): unless
-- c is still held (SCHEDULED, after_left > 0: re-checked here, in the
-- script that writes) nothing.  DONE, or any end for an after_any_end
-- child, counts one parent: at the last one c is due at the later of its
-- after_at and now + after_delay_us, and the workers are woken.  Else c
-- is CANCELLED naming p, and finish() hands its own children to
-- after_end's queue (a chain is a loop, not a recursion).
local after_woke = false
local function after_apply(c, p, how, t)
  local tk = T(c)
  local v = tcall('HMGET', tk, 'state', 'after_left', 'after_any_end', 'kind', 'key', 'priority', 'after_at', 'after_delay_us')
  if v[1] ~= 'SCHEDULED' or N(v[2]) <= 0 then return end
  if how == 'DONE' or N(v[3]) ~= 0 then
    if N(v[2]) > 1 then tcall('HINCRBY', tk, 'after_left', -1) return end
    local due = t + N(v[8])
    local ds = I(due)
    if v[7] and tonumber(v[7]) > due then due, ds = tonumber(v[7]), v[7] end
    tcall('HDEL', tk, 'after_left')
    tcall('HSET', tk, 'due_at', ds, 'updated_at', I(t))
    idx_add(c, v[4], N(v[6]), due)
    if not after_woke then after_woke = true wake() end
    return
  end
  tcall('HSET', tk, 'state', 'CANCELLED', 'last_error', 'parent task ' .. p .. ' ended ' .. how, 'updated_at', I(t))
  finish(c, v[4], v[5], 'SCHEDULED', 'CANCELLED', t)
end

local function is_local(c)
  shards()
  return SHN == 1 or tonumber(c) % SHN == SHI
end

-- Task id ended `how`: each child in :ac:id, once (the set goes with
-- this step; a parent ends once: terminal states do not change, and a
-- retried DEAD parent has none left), in this shard now, or, in another
-- shard, as a message 'E c p how' in this shard's outbox.  One SCARD
-- for a task without children (the per-task path of complete; not
-- EXISTS, which a user may be refused: test_redis_store.c).
local AQ, adraining = {}, false
after_end = function(id, how, t)
  if redis.call('SCARD', K('ac', id)) == 0 then return end
  AQ[#AQ + 1] = {I(tonumber(id)), how}
  if adraining then return end
  adraining = true
  local qi = 1
  while qi <= #AQ do
    local p, h = AQ[qi][1], AQ[qi][2]
    qi = qi + 1
    local ck = K('ac', p)
    local kids = redis.call('SMEMBERS', ck)
    redis.call('DEL', ck)
    for _, c in ipairs(kids) do
      if is_local(c) then after_apply(tonumber(c), p, h, t)
      else
        redis.call('RPUSH', KOB, 'E ' .. c .. ' ' .. p .. ' ' .. h)
        outboxed = true
      end
    end
  end
  AQ, adraining = {}, false
end

-- The operations of a sharded store's forwarder (redis_shard.c), defined
-- by cold().
local function after_cold()
  -- after_states: ids... -> each one's state ('' for none)
  ops.after_states = function()
    local out = {}
    for j = 2, #A do out[#out + 1] = tcall('HGET', T(A[j]), 'state') or '' end
    return out
  end
  -- after_link: parent child -> 'LIVE' (the edge is kept: p's end will
  -- send c its message) or p's end state ('' when it is gone)
  ops.after_link = function()
    local st = tcall('HGET', T(A[2]), 'state')
    if parent_live(st) then redis.call('SADD', K('ac', A[2]), A[3]) return 'LIVE' end
    return st or ''
  end
  -- after_ended: child parent how -> 1 applied, 0 already heard (the
  -- child's :ae set records each parent once: a message delivered twice
  -- counts once) or no such child
  ops.after_ended = function()
    local c, p = A[2], A[3]
    if not tcall('HGET', T(c), 'state') then return 0 end
    if redis.call('SADD', K('ae', c), p) == 0 then return 0 end
    after_apply(tonumber(c), p, A[4], now())
    return 1
  end
  -- outbox: -> the first 100 messages; outbox_del: message -> removed
  ops.outbox = function() return redis.call('LRANGE', KOB, 0, 99) end
  ops.outbox_del = function() return redis.call('LREM', KOB, 1, A[2]) end
end
