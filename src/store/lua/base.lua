-- base.lua - the first part of the Redis store's script: its keys, a
-- task hash's field names, numbers as strings, the due index's
-- members, the wake channel.
--
-- The script is one Lua chunk: the files of src/store/lua/ joined in
-- the order of DUE_REDIS_LUA (CMakeLists.txt), each using the locals
-- of the parts before it, after a prelude redis.c writes
-- (src/store/redis_lua.c says how it is built, loaded and run).  It
-- runs on Redis's Lua 5.1: no goto, no // and no bitwise operators
-- (the bit library: bit.band), unpack and not table.unpack, at most
-- 60 upvalues a function; tests/lua/luac.sh checks every file and the
-- whole chunk with luac5.1.
--
-- prelude from C: TC, SC, KC (column lists of row.h), F (a task hash's
-- field letters, below), ROW0() (a new task row of #TC falses, sized at
-- once), CL (the server is a cluster node), HB (histogram bounds)
--
-- The chunk only defines: it is loaded once as a Redis 7 function
-- library and then each call runs run() (dispatch.lua), or, on a
-- server without functions, it runs whole at each EVALSHA and ends by
-- calling run().  So nothing at the top level may read the call (KEYS,
-- ARGV, the server) or a library (a function library's load sees no
-- string, table, struct, ipairs...: only the functions it defines call
-- them, when they run): what one call needs of its own is a local below
-- that run() sets or resets first (P, A, done_said, the deferred
-- writes, the cached keys and counts), never a value a previous call
-- left.
--
-- P: the store's key prefix ("{due:NAME}"), A: the call's arguments
local P, A
local function K(a, b) if b then return P .. ':' .. a .. ':' .. b end return P .. ':' .. a end
local function T(id) return P .. ':t:' .. id end
-- A task hash's field names are one letter each (a listpack stores
-- each name in every task): tcall() maps row.h's column names to them
-- for the H* commands on a task key, so the script reads as SQL does.
-- F, the letter of each row.h column, is the prelude's (redis.c's
-- DUE_RD_FIELDS, which the claim rows' decoder reads too); two fields
-- have no column:
F.after_at, F.after_delay_us = 'i', 'j'
local function tcall(cmd, key, ...)
  local a = {...}
  local step = 1
  if cmd == 'HSET' then step = 2 elseif cmd == 'HSETNX' or cmd == 'HINCRBY' then a[1] = F[a[1]] or a[1] step = 0 end
  if step > 0 then for j = 1, #a, step do a[j] = F[a[j]] or a[j] end end
  return redis.call(cmd, key, unpack(a))
end
-- the call's clock (now()) and, once asked, its string: a call writes
-- it several times a task (updated_at, the attempt's ended_at, :fin's
-- score), and a string.format costs more than the check (run() resets)
local NOW, NOW_S
local function I(n)
  if n == NOW then
    if not NOW_S then NOW_S = string.format('%d', n) end
    return NOW_S
  end
  return string.format('%d', n)
end
-- (a '0' field, the most common, without tonumber's strtod: Lua
-- compares interned strings by address)
local function N(s) if s == '0' or not s then return 0 end return tonumber(s) or 0 end
local function opt(s) if s == nil or s == '' then return nil end return string.sub(s, 2) end
local function now()
  local t = redis.call('TIME')
  NOW, NOW_S = tonumber(t[1]) * 1000000 + tonumber(t[2]), nil
  return NOW
end
local function lq(s) return #s .. ':' .. s end
-- A due index member is 18 bytes: priority + 32768 (2), due_at (8), id
-- (8), big-endian, so ZRANGEBYLEX (memcmp) orders by (priority, due_at,
-- id).  Lua's < on strings is strcoll (Redis sets LC_COLLATE), so the
-- script sorts members by their decoded numbers (mless), never by <.
local function be(n) return struct.pack('>I8', n) end
local FF8 = '\255\255\255\255\255\255\255\255' -- string.rep: not at load
local FF16 = FF8 .. FF8
local function mem(prio, due, id) if due < 0 then due = 0 end return struct.pack('>HI8I8', prio + 32768, due, id) end
local function mid(m) return (struct.unpack('>I8', m, 11)) end
local function mdue(m) return (struct.unpack('>I8', m, 3)) end
local function mless(a, b)
  local pa, da, ia = struct.unpack('>HI8I8', a)
  local pb, db, ib = struct.unpack('>HI8I8', b)
  if pa ~= pb then return pa < pb end
  if da ~= db then return da < db end
  return ia < ib
end
-- the inclusive upper bound of priority p's members due at or before t
local function upto(p, t) return '[' .. p .. be(math.max(t, 0)) .. FF8 end
local function bucket(us) local ms = us / 1000 local b = 0 while b < #HB and ms > HB[b + 1] do b = b + 1 end return b end
-- a histogram's field for us: 'late:3', 'dur:0' (names kept once made:
-- they depend on HB alone)
local HF = {late = {}, dur = {}}
local function hfield(h, us)
  local b = bucket(us)
  local f = HF[h][b]
  if not f then f = h .. ':' .. string.format('%d', b) HF[h][b] = f end
  return f
end
-- one wake channel for every shard of a store: {due:NAME}:wake
local function wake() redis.call('PUBLISH', (string.gsub(P, '^({due:[^:]+):%d+}$', '%1}')) .. ':wake', '1') end
-- finished tasks (due_wait): one PUBLISH on {due:NAME}:done per call
-- that finished one, only while someone waits (the shard's waiters key,
-- set by redis.c's rd_listen_done for 30 s at a time)
local done_said
local function done_wake()
  if done_said then return end
  done_said = true
  -- GET, not EXISTS: a user may be refused EXISTS (test_redis_store.c)
  if redis.call('GET', P .. ':waiters') then
    redis.call('PUBLISH', (string.gsub(P, '^({due:[^:]+):%d+}$', '%1}')) .. ':done', '1')
  end
end
