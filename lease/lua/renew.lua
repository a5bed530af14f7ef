-- KEYS: lease. ARGV: token, ttl_ms. Returns 1 when renewed, 0 when the lease
-- is gone or held under another token.
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '|' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
