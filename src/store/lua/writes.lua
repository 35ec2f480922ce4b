-- writes.lua - the deferred writes (after base.lua).
--
-- Deferred writes: an operation's sorted-set adds/removes and hash
-- increments are queued (last write per member wins, increments summed)
-- and sent as one ZREM + one ZADD per sorted set and one HINCRBY per
-- field by flush(), which runs before any read of those keys and at the
-- end of the operation: a claim of 16 tasks is a few commands per key,
-- not a few per task.
local ZQ, ZK, HQ, HK, DK -- run() makes them empty
local KDUE, KKC, KDPM, KLAT -- run() sets them: K('due'), ...
-- The metrics of the tries claimed in minute M (late:B, late_sum,
-- dur:B, dur_sum, out:X, stale) are in the hash :mw:M, kept 17 minutes
-- (EXPIRE once per operation and key): metrics reads the 16 minutes
-- that cover DUE_METRICS_WINDOW_US, whatever the history's length.
local KMW -- K('mw') .. ':' (run())
-- keys a task's steps name again and again, made once a call: :lease,
-- :fin, :dk:<kind> (KDK); run() empties them
local KLEASE, KFIN, KDK
local function kdk(kind) local k = KDK[kind] if not k then k = K('dk', kind) KDK[kind] = k end return k end
local MW_TTL = 1020
-- (the last minute's key kept: a call's tries mostly share a minute;
-- run() forgets it with KMW)
local MW_M, MW_K
local function mw(us)
  local m = math.floor(us / 60000000)
  if m ~= MW_M then MW_M, MW_K = m, KMW .. string.format('%d', m) end
  return MW_K
end
-- Numbers become strings with I() (an integer format): a Lua number
-- in a concatenation, tostring() or a redis.call argument is printed
-- as a float (%.14g / %.17g), the costliest step of a claim.
local function zq(key, m, score)
  local q = ZQ[key]
  if not q then q = {} ZQ[key] = q ZK[#ZK + 1] = key end
  if type(m) == 'number' then m = I(m) end
  if score and type(score) == 'number' then score = I(score) end
  q[m] = score
end
local function zadd(key, score, m) zq(key, m, score) end
local function zrem(key, m) zq(key, m, false) end
-- The ids of each state but CLAIMED (SCHEDULED, DONE, CANCELLED, DEAD;
-- CLAIMED's are :lease's members) are bitmaps, not sorted sets (layout
-- 4): bit id % SB of the string :sb:<STATE>:<chunk>, chunk = id / SB,
-- and :sc:<STATE> holds the chunks in use (a sorted set, score = member
-- = chunk), so `ls` pages a state in id order.  A task then pays a bit
-- where a sorted-set member cost about 100 bytes and a skiplist insert;
-- a chunk holding one id alone costs about 300 (the worst case: one id
-- of a state in SB).  Bits are queued like the sets' members (last
-- write wins) and flush() sends one BITFIELD per chunk; a chunk left
-- with no bit set is deleted.
local SB = 1024
local SQ, SK -- run() makes them empty
local function sbit(state, id, v)
  local c = math.floor(tonumber(id) / SB)
  local key = P .. ':sb:' .. state .. ':' .. I(c)
  local q = SQ[key]
  if not q then q = {s = state, c = c, b = {}} SQ[key] = q SK[#SK + 1] = key end
  q.b[tonumber(id) - c * SB] = v
end
local function hincr(key, f, n)
  local q = HQ[key]
  if not q then q = {} HQ[key] = q HK[#HK + 1] = key end
  q[f] = (q[f] or 0) + n
end
local function chunked(cmd, key, args)
  for i = 1, #args, 4000 do redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args))) end
end
local function sflush()
  for _, key in ipairs(SK) do
    local q, args, set = SQ[key], {}, false
    for b, v in pairs(q.b) do
      args[#args + 1] = 'SET' args[#args + 1] = 'u1' args[#args + 1] = I(b) args[#args + 1] = v
      if v == '1' then set = true end
    end
    redis.call('BITFIELD', key, unpack(args))
    if set then zadd(K('sc', q.s), q.c, q.c)
    elseif redis.call('BITCOUNT', key) == 0 then redis.call('DEL', key) zrem(K('sc', q.s), q.c) end
  end
  SQ, SK = {}, {}
end
local function flush()
  if #SK > 0 then sflush() end
  for _, key in ipairs(ZK) do
    local add, rem = {}, {}
    for m, sc in pairs(ZQ[key]) do
      if sc then add[#add + 1] = sc add[#add + 1] = m else rem[#rem + 1] = m end
    end
    if #rem > 0 then chunked('ZREM', key, rem) end
    if #add > 0 then chunked('ZADD', key, add) end
    local kind = DK[key]
    if kind then
      if #add > 0 then redis.call('ZADD', K('dkinds'), 0, kind)
      elseif redis.call('ZCARD', key) == 0 then redis.call('ZREM', K('dkinds'), kind) end
    end
    if key == KLAT and #add > 0 then redis.call('ZREMRANGEBYRANK', KLAT, 0, -10001) end
  end
  for _, key in ipairs(HK) do
    if string.sub(key, 1, #KMW) == KMW then redis.call('EXPIRE', key, MW_TTL) end
    for f, n in pairs(HQ[key]) do
      if n ~= 0 then
        local v = redis.call('HINCRBY', key, f, I(n))
        if key == KKC and v <= 0 then redis.call('HDEL', key, f) end
        if key == KDPM and v == n and redis.call('HLEN', key) > 901 then
          local sec = tonumber(f)
          for _, f2 in ipairs(redis.call('HKEYS', key)) do
            if tonumber(f2) < sec - 900 then redis.call('HDEL', key, f2) end
          end
        end
      end
    end
  end
  ZQ, ZK, HQ, HK = {}, {}, {}, {}
end
