-- KEYS: lease, state. ARGV: by, state_ttl_ms.
-- Force-releases the lease whatever its token; returns {holder, since, fence}
-- of the lease removed, or an empty list when none was held.
local l = redis.call('HMGET', KEYS[1], 'holder', 'since', 'fence')
if not l[1] then return {} end
redis.call('DEL', KEYS[1])
local now_ms = math.floor(now_us() / 1000)
redis.call('HSET', KEYS[2], 'unlocked_by', ARGV[1], 'unlocked_at', num(now_ms))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {l[1], l[2], l[3]}
