-- KEYS: due, dueinfo, the shard's layout key (shards_refused). ARGV
-- (enqueueArgs): member, reason, delay_ms, attempt, tick_ms, reqs, the
-- shard count.
if shards_refused(KEYS[#KEYS], ARGV[A_SHARDS]) then return redis.error_reply(SHARDS_CHANGED) end
local now_ms = math.floor(now_us() / 1000)
return add_due(KEYS[1], KEYS[2], ARGV[A_MEMBER], ARGV[A_REASON], now_ms + tonumber(ARGV[A_DELAY]), ARGV[A_ATTEMPT], ARGV[A_TICK], ARGV[A_REQS])
