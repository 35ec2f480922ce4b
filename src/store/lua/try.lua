-- try.lua - a claimed try's lease is extended, or the try ends without
-- a result: fail, reclaim (after claim.lua).
--
ops.extend = function()
  local t, id, att, lease = now(), tonumber(A[2]), tonumber(A[3]), tonumber(A[4])
  local v = tcall('HMGET', T(id), 'state', 'attempt', 'cancel_requested', 'kind', 'grp', 'lease_until')
  if v[1] ~= 'CLAIMED' or N(v[2]) ~= att then return 1 end
  if N(v[3]) ~= 0 then return 2 end
  if N(v[6]) < t then return 1 end
  tcall('HSET', T(id), 'lease_until', I(t + lease), 'updated_at', I(t))
  lease_set(id, v[4], v[5] or nil, t + lease)
  return 0
end

-- a CLAIMED try ends without a result: CANCELLED, DEAD or SCHEDULED at due
local function end_try(id, v, t, err, due)
  local tk = T(id)
  local kind, key, grp = v[4], v[5], v[6]
  local att, base, maxa = N(v[2]), N(v[7]), N(v[8])
  lease_del(id, kind, grp)
  tcall('HDEL', tk, 'lease_owner', 'lease_until', 'n')
  local ns
  if N(v[3]) ~= 0 then ns = 'CANCELLED'
  elseif att - base >= maxa then ns = 'DEAD'
  else ns = 'SCHEDULED' end
  if err then tcall('HSET', tk, 'last_error', err) end
  tcall('HSET', tk, 'state', ns, 'updated_at', I(t))
  if ns == 'SCHEDULED' then
    if due == nil then due = t + backoff(N(v[9]), N(v[10]), att - base) end
    tcall('HSET', tk, 'due_at', I(due))
    move(id, kind, 'CLAIMED', 'SCHEDULED')
    idx_add(id, kind, N(v[11]), due)
  else
    finish(id, kind, key, 'CLAIMED', ns, t)
  end
  return ns
end
local TRY = {'state', 'attempt', 'cancel_requested', 'kind', 'key', 'grp', 'attempt_base', 'max_attempts', 'backoff_us', 'backoff_cap_us', 'priority', 'lease_until', 'lease_owner', 'n', 'due_at'}

ops.fail = function()
  local t, id, att, err, as = now(), tonumber(A[2]), tonumber(A[3]), opt(A[4]), A[5]
  local v = tcall('HMGET', T(id), unpack(TRY))
  if v[1] ~= 'CLAIMED' or N(v[2]) ~= att then mark_late(id, att) return 'STALE' end
  local ns = end_try(id, v, t, err, nil)
  if ns == 'CANCELLED' then as = 'CANCELLED' end
  end_attempt(id, att, t, as, err, v[13], v[14], v[15])
  if ns == 'SCHEDULED' then wake() end
  return ns
end

ops.reclaim = function()
  local t = now()
  local ids = redis.call('ZRANGEBYSCORE', K('lease'), '-inf', '(' .. I(t), 'LIMIT', 0, 1000)
  local res, dead, canc = 0, 0, 0
  for _, sid in ipairs(ids) do
    local id = tonumber(sid)
    local v = tcall('HMGET', T(id), unpack(TRY))
    if v[1] == 'CLAIMED' and N(v[12]) < t then
      local ns = end_try(id, v, t, 'lease expired (held by ' .. (v[13] or '') .. ')', t)
      end_attempt(id, N(v[2]), t, 'LEASE_EXPIRED', 'lease expired', v[13], v[14], v[15])
      if ns == 'DEAD' then dead = dead + 1 elseif ns == 'CANCELLED' then canc = canc + 1 else res = res + 1 end
    elseif v[1] ~= 'CLAIMED' then
      redis.call('ZREM', K('lease'), sid)
    end
  end
  if res > 0 then wake() end
  -- the workers' maintenance forwards what a crash left in the outbox
  if redis.call('LLEN', K('ob')) > 0 then outboxed = true end
  flush()
  local nx = redis.call('ZRANGE', K('lease'), 0, 0, 'WITHSCORES')
  return {res, dead, canc, I(t), nx[2] or '0', #ids == 1000 and 1 or 0}
end
