-- KEYS: due, dueinfo. ARGV: member, reason, delay_ms, attempt, tick_ms, reqs.
local now_ms = math.floor(now_us() / 1000)
return add_due(KEYS[1], KEYS[2], ARGV[1], ARGV[2], now_ms + tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6])
