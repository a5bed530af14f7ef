-- KEYS: due, dueinfo. ARGV (enqueueArgs): member, reason, delay_ms, attempt, tick_ms, reqs.
local now_ms = math.floor(now_us() / 1000)
return add_due(KEYS[1], KEYS[2], ARGV[A_MEMBER], ARGV[A_REASON], now_ms + tonumber(ARGV[A_DELAY]), ARGV[A_ATTEMPT], ARGV[A_TICK], ARGV[A_REQS])
