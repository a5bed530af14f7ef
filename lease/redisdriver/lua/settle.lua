-- KEYS: the limit's holders (zset). ARGV (settleArgs): holder, ttl_ms, base,
-- interval_us, the number of runs pairs, then key, runs pairs (the holder's
-- runs under the limit by budget key, all of them), then the keys whose
-- rate gives one start back (granted, not used).
-- Sets the holder's runs, counted for ttl (none: the holder is gone).
local now_v = now_us()
local now = math.floor(now_v / 1000)
local base, holder = ARGV[A_BASE], ARGV[A_HOLDER]
local ttl, ival = tonumber(ARGV[A_TTL]), tonumber(ARGV[A_IVAL])
local pairs_n = tonumber(ARGV[A_PAIRS])
local rk = base .. ':runs:' .. holder
redis.call('DEL', rk)
if pairs_n > 0 then
  local hs = {}
  for i = 1, 2 * pairs_n do hs[i] = ARGV[A_FIXED + i] end
  redis.call('HSET', rk, unpack(hs))
  redis.call('PEXPIRE', rk, ttl)
  redis.call('ZADD', KEYS[1], now + ttl, holder)
else
  redis.call('ZREM', KEYS[1], holder)
end
for i = A_FIXED + 2 * pairs_n + 1, #ARGV do
  local tk = base .. ':tat:' .. ARGV[i]
  local t = tonumber(redis.call('GET', tk))
  if t then
    t = t - ival
    if t > now_v then
      redis.call('SET', tk, num(t), 'PX', math.max(1, math.ceil((t - now_v) / 1000)))
    else
      redis.call('DEL', tk)
    end
  end
end
return 1
