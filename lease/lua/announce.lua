-- KEYS: replicas. ARGV: replica (escaped), ttl_ms, tasks (escaped, space-joined).
-- Records which tasks this replica runs, until now + ttl (Redis's clock),
-- and forgets the replicas whose announcement ran out.
local now_ms = math.floor(now_us() / 1000)
redis.call('HSET', KEYS[1], ARGV[1], encode_announce({until_ms = num(now_ms + tonumber(ARGV[2])), tasks = ARGV[3]}))
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local a = decode_announce(all[i + 1])
  if not a or tonumber(a.until_ms) < now_ms then redis.call('HDEL', KEYS[1], all[i]) end
end
return 1
