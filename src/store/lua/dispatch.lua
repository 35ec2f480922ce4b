-- dispatch.lua - the last part: run(keys, args), one call: its state
-- set afresh, operation A[1], then the deferred writes.  redis.c ends
-- the chunk with `return run(KEYS, ARGV)` for EVALSHA, or registers run
-- as the library's functions (redis.c, load_script).
local function run(keys, args)
  P, A = string.sub(keys[1], 1, -6), args
  -- Redis Cluster: while the store's slot is MIGRATING away from this
  -- node a key that is not here (already moved, or never written)
  -- cannot be read or written, and the script would stop half-way, its
  -- first writes kept.  The probe key never exists, so reading it fails
  -- exactly when the slot is migrating: stop before any write; redis.c
  -- waits for the migration to end (MOVED) and sends the operation
  -- again.  One server has no slots: no probe there.
  if CL and type(redis.pcall('EXISTS', P .. ':probe')) == 'table' then
    return redis.error_reply('TRYAGAIN due: the store\'s slot is migrating')
  end
  done_said, outboxed, after_woke, adraining = false, false, false, false
  ZQ, ZK, HQ, HK, DK, LKM, AQ = {}, {}, {}, {}, {}, {}, {}
  KDH, KKC, KDPM, KLAT, KMW, KOB = K('dh'), K('kc'), K('dpm'), K('lat'), K('mw') .. ':', K('ob')
  SHN, SHI, SEQ_NEXT, SEQ_END = nil, nil, 1, 0
  NOW, NOW_S, MW_M, MW_K = nil, nil, nil, nil
  KLEASE, KFIN, KDK, SQ, SK, DHINT = K('lease'), K('fin'), {}, {}, {}, {}
  local op = ops[A[1]]
  if not op then cold() op = ops[A[1]] end
  if not op then return redis.error_reply('due: unknown operation ' .. tostring(A[1])) end
  local res = op()
  flush()
  -- a message left in the outbox (after.lua): the reply says so, wrapped
  -- (redis.c unwraps it and remembers, for redis_shard.c's forwarder)
  if outboxed and not (type(res) == 'table' and res.err) then return {'due:outbox', res} end
  return res
end
