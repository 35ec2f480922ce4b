-- after.lua - run after (issue 38): a parent's end releases or cancels
-- the tasks added after it (after ops.lua; the fields and edges are
-- described in task.lua, above the declaration of after_fns).
--
-- child c of parent p, which ended `how` (DONE, DEAD, CANCELLED): unless
-- c is still held (SCHEDULED, after_left > 0: re-checked here, in the
-- script that writes) nothing.  DONE, or any end for an after_any_end
-- child, counts one parent: at the last one c is due at the later of its
-- after_at and now + after_delay_us, and the workers are woken.  Else c
-- is CANCELLED naming p, and finish() hands its own children to
-- after_end's queue (a chain is a loop, not a recursion).
local after_drain
-- per call (run() resets them): the outbox key K('ob'), whether this
-- call woke the workers, the queue of ended parents and its drain
local KOB, after_woke, AQ, adraining
after_fns = function()
  if after_link then return end
  local HELD = '253402300799999999'
  local function parent_live(st) return st == 'SCHEDULED' or st == 'CLAIMED' end
  -- The parents of new task id (A[i + 13]: "41,42r,43d": a bare id is in
  -- this shard and read here; r: another shard's, live when the caller
  -- checked it, linked by the forwarder through the outbox; d: another
  -- shard's that ended and counts as done): its edges and fields into h;
  -- returns after_left.  The caller (ops.submit) checked them first.
  after_link = function(id, i, h)
    local left, n, zs = 0, 0, {}
    local sid = I(id)
    for p, mark in string.gmatch(A[i + 13], '(%d+)(%a?)') do
      n = n + 1
      zs[#zs + 1] = p
      zs[#zs + 1] = p
      if mark == 'r' then
        left = left + 1
        redis.call('RPUSH', KOB, 'L ' .. sid .. ' ' .. p)
        outboxed = true
      elseif mark == '' and parent_live(tcall('HGET', T(p), 'state')) then
        left = left + 1
        redis.call('SADD', K('ac', p), sid)
      end
    end
    chunked('ZADD', K('ap', sid), zs)
    -- (h names the fields by their letters: submit_one)
    h[#h + 1] = F.after_n h[#h + 1] = I(n)
    if A[i + 12] == '1' then h[#h + 1] = F.after_any_end h[#h + 1] = '1' end
    if left > 0 then
      h[#h + 1] = F.after_left h[#h + 1] = I(left)
      if A[i + 2] ~= '' then h[#h + 1] = F.after_at h[#h + 1] = A[i + 2] end
      if tonumber(A[i + 3]) ~= 0 then h[#h + 1] = F.after_delay_us h[#h + 1] = A[i + 3] end
      for j = 1, #h, 2 do if h[j] == F.due_at then h[j + 1] = HELD end end
    end
    return left
  end
  -- Refusals before anything is written (ops.submit): the bare parents of
  -- every item of the call must be here, and live or DONE (or any end with
  -- after_any_end).  nil, or {'REFUSED', 'NOTFOUND'|'STATE', id, state}.
  after_check = function(n)
    for j = 0, n - 1 do
      local i = 3 + j * 14
      if A[i + 13] ~= '' then
        local any = A[i + 12] == '1'
        for p, mark in string.gmatch(A[i + 13], '(%d+)(%a?)') do
          if mark == '' then
            local st = tcall('HGET', T(p), 'state')
            if not st then return {'REFUSED', 'NOTFOUND', p, ''} end
            if (st == 'DEAD' or st == 'CANCELLED') and not any then return {'REFUSED', 'STATE', p, st} end
          end
        end
      end
    end
    return nil
  end

  -- A held task's own time (reschedule, on_key replace/later): at (a
  -- string, '' for none) or the delay, kept for its release; payload
  -- unless nil.  `later` takes a time (due) only when it is later than
  -- the earliest a release now would give the task, max(its at, now t
  -- + its delay), as on every store.  Returns 1 when it was moved.
  held_move = function(id, on, at, delay, due, payload, t)
    local tk = T(id)
    if on == 'later' then
      local v = tcall('HMGET', tk, 'after_at', 'after_delay_us')
      local earliest = t + N(v[2])
      if v[1] and tonumber(v[1]) > earliest then earliest = tonumber(v[1]) end
      if not (earliest < due) then return 0 end
    end
    local h = {'updated_at', I(t)}
    if at ~= '' then
      h[3], h[4] = 'after_at', at
      tcall('HDEL', tk, 'after_delay_us')
    else
      h[3], h[4] = 'after_delay_us', delay
      tcall('HDEL', tk, 'after_at')
    end
    if payload then h[#h + 1] = 'payload' h[#h + 1] = payload end
    tcall('HSET', tk, unpack(h))
    return 1
  end

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
  after_drain = function(id, how, t)
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

  -- The operations of a sharded store's forwarder (redis_shard.c).
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

-- Task id ended: nothing to do but one SCARD for a task without
-- children (the per-task path of complete; not EXISTS, which a user may
-- be refused: test_redis_store.c).
after_end = function(id, how, t)
  if redis.call('SCARD', K('ac', id)) == 0 then return end
  after_fns()
  after_drain(id, how, t)
end
