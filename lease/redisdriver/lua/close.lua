-- KEYS: the limit's closed set (zset: key → until ms). ARGV (closeArgs):
-- base, key, ms, why (escaped). Closes the budget key for ms: base:closed:KEY
-- holds why until then; the set lists the budgets closed, for status.
local now = math.floor(now_us() / 1000)
local ms = tonumber(ARGV[A_MS])
redis.call('SET', ARGV[A_BASE] .. ':closed:' .. ARGV[A_KEY], ARGV[A_WHY], 'PX', math.max(1, ms))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
redis.call('ZADD', KEYS[1], now + ms, ARGV[A_KEY])
return 1
