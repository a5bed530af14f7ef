-- KEYS: lease, unlocked. ARGV: by, state_ttl_ms.
-- Force-releases the lease whatever its token and records "at_ms|by";
-- returns {holder, since, fence} of the lease removed, or {} when none.
local v = redis.call('GET', KEYS[1])
if not v then return {} end
local since, fence, _, _, holder = parse_lease(v)
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], num(math.floor(now_us() / 1000)) .. '|' .. ARGV[1], 'PX', ARGV[2])
return {holder, since, fence}
