-- dispatch.lua - the last part: run operation A[1], then the deferred
-- writes.
local op = ops[A[1]]
if not op then cold() op = ops[A[1]] end
if not op then return redis.error_reply('due: unknown operation ' .. tostring(A[1])) end
local res = op()
flush()
return res
