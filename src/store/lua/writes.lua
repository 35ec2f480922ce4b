-- writes.lua - the deferred writes (after base.lua).
--
-- Deferred writes: an operation's sorted-set adds/removes and hash
-- increments are queued (last write per member wins, increments summed)
-- and sent as one ZREM + one ZADD per sorted set and one HINCRBY per
-- field by flush(), which runs before any read of those keys and at the
-- end of the operation: a claim of 16 tasks is a few commands per key,
-- not a few per task.
local ZQ, ZK, HQ, HK, DK -- run() makes them empty
local KDH, KKC, KDPM, KLAT -- run() sets them: K('dh'), ...
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
-- write wins) and flush() sends one BITFIELD per chunk, which also keeps
-- the chunk's count of set bits (u16 at bit SB, after the bitmap): the
-- count's new value says whether the chunk was new (add it to :sc) or
-- is now empty (delete it), with no other command.  A SET whose bit was
-- already so (its old value, in the reply) is taken out of the count
-- again, so the count stays exact whatever was asked.
local SB, SB_CNT = 1024, '1024'
local SQ, SK -- run() makes them empty
-- the offsets' strings, made once (they depend on nothing of a call)
local SBO = {}
-- SQ[state][chunk]: the chunk's queued bits, its key; SK lists them
local function sbit(state, id, v)
  local n = tonumber(id)
  local c = math.floor(n / SB)
  local qs = SQ[state]
  if not qs then qs = {} SQ[state] = qs end
  local q = qs[c]
  if not q then
    q = {s = state, c = c, b = {}, k = P .. ':sb:' .. state .. ':' .. I(c)}
    qs[c] = q
    SK[#SK + 1] = q
  end
  q.b[n - c * SB] = v
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
  for _, q in ipairs(SK) do
    local key, args, vs, d = q.k, {}, {}, 0
    for b, v in pairs(q.b) do
      local o = SBO[b]
      if not o then o = string.format('%d', b) SBO[b] = o end
      args[#args + 1] = 'SET' args[#args + 1] = 'u1' args[#args + 1] = o args[#args + 1] = v
      vs[#vs + 1] = v
      if v == '1' then d = d + 1 else d = d - 1 end
    end
    args[#args + 1] = 'INCRBY' args[#args + 1] = 'u16' args[#args + 1] = SB_CNT args[#args + 1] = I(d)
    local r = redis.call('BITFIELD', key, unpack(args))
    local fix = 0
    for i, v in ipairs(vs) do
      if v == '1' then if r[i] == 1 then fix = fix - 1 end elseif r[i] == 0 then fix = fix + 1 end
    end
    local cnt = r[#vs + 1]
    if fix ~= 0 then cnt = redis.call('BITFIELD', key, 'INCRBY', 'u16', SB_CNT, I(fix))[1] end
    if cnt == 0 then redis.call('DEL', key) zrem(K('sc', q.s), q.c)
    elseif cnt == d + fix then zadd(K('sc', q.s), q.c, q.c) end
  end
  SQ, SK = {}, {}
end
-- The due order of every kind together (layout 4): there is no index
-- of all scheduled tasks, only each kind's :dk:<kind>, and :dh, the
-- heads: for each (kind, priority) in use, the first member of that
-- priority in :dk:<kind> followed by the kind's name (a lex set, so in
-- (priority, due_at, id) order).  A claim walks :dh to the kinds whose
-- head is due and merges their members (claim.lua's due_scan).  flush()
-- keeps it: the head of each priority a write touched, read before and
-- after the write, moves when it changed.
local function dhead(key, p)
  return redis.call('ZRANGEBYLEX', key, '[' .. p, '[' .. p .. FF16, 'LIMIT', 0, 1)[1] or false
end
-- the first member of each priority in use of a lex due index (the
-- priorities' loose index scan of the claim)
local function heads(src)
  local out, lo = {}, '-'
  while true do
    local first = redis.call('ZRANGEBYLEX', src, lo, '+', 'LIMIT', 0, 1)
    if #first == 0 then return out end
    out[#out + 1] = first[1]
    lo = '(' .. string.sub(first[1], 1, 2) .. FF16
  end
end
-- DHINT[key][p]: the head of priority p of :dk key as a claim read it
-- (claim.lua's due_scan) after the last flush: this flush need not read
-- it again (flush empties it)
local DHINT -- run() makes it empty
-- zonly: the sorted sets alone (their heads with them), for a claim's
-- reads of the due and lease indexes; the counters and the state bitmaps,
-- which no claim reads, wait for the end of the call, so a claim that
-- carries completions writes each counter once (CLAIMED:<kind> and
-- out:RUNNING, -n then +n, cancel out and are not sent at all)
local function flush(zonly)
  if not zonly and #SK > 0 then sflush() end
  for _, key in ipairs(ZK) do
    local add, rem = {}, {}
    local kind, ps, old = DK[key], {}, {}
    for m, sc in pairs(ZQ[key]) do
      if sc then add[#add + 1] = sc add[#add + 1] = m else rem[#rem + 1] = m end
      if kind then ps[string.sub(m, 1, 2)] = true end
    end
    if kind then
      local hint = DHINT[key]
      for p in pairs(ps) do old[p] = (hint and hint[p]) or dhead(key, p) end
    end
    if #rem > 0 then chunked('ZREM', key, rem) end
    if #add > 0 then chunked('ZADD', key, add) end
    if kind then
      for p in pairs(ps) do
        local h = dhead(key, p)
        if h ~= old[p] then
          if old[p] then redis.call('ZREM', KDH, old[p] .. kind) end
          if h then redis.call('ZADD', KDH, 0, h .. kind) end
        end
      end
    end
    if key == KLAT and #add > 0 then redis.call('ZREMRANGEBYRANK', KLAT, 0, -10001) end
  end
  if zonly then ZQ, ZK, DHINT = {}, {}, {} return end
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
  ZQ, ZK, HQ, HK, DHINT = {}, {}, {}, {}, {}
end
