-- dispatch.lua - the last part: run operation A[1], then the deferred
-- writes.
local op = ops[A[1]]
if not op then cold() op = ops[A[1]] end
if not op then return redis.error_reply('due: unknown operation ' .. tostring(A[1])) end
local res = op()
flush()
-- a message left in the outbox (after.lua): the reply says so, wrapped
-- (redis.c unwraps it and remembers, for redis_shard.c's forwarder)
if outboxed and not (type(res) == 'table' and res.err) then return {'due:outbox', res} end
return res
