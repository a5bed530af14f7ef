-- KEYS: the limit's bucket epoch, its holders (zset: holder → until ms).
-- ARGV (limitArgs): max_ttl_ms, holder, ttl_ms, base (the limit's key
-- prefix), concurrency (0: none), interval_us and tolerance_us (the rate's
-- GCRA: 0 interval for none), then one budget key per start asked for ("":
-- the limit's one budget, else an escaped entity).
-- Grants each start whose budget has room, in order: not closed, fewer runs
-- than the concurrency over every live holder (base:runs:HOLDER, a hash of
-- runs by key, kept while its holder renews it), and a start at the rate
-- (base:tat:KEY, the theoretical arrival time in us). Answers, space-joined:
-- ok, n (full), r:WAIT_MS (rate), c:LEFT_MS:WHY (closed), q:LEFT_MS (a data
-- loss: nothing is granted for max_ttl, as for leases).
local now_v = now_us()
local now = math.floor(now_v / 1000)
local n = #ARGV - A_FIXED
local out = {}
local q = quarantine(KEYS[1], now, tonumber(ARGV[A_MAX_TTL]))
if q > 0 then
  for i = 1, n do out[i] = 'q:' .. num(q) end
  return reply(out)
end
local holders, base, holder = KEYS[2], ARGV[A_BASE], ARGV[A_HOLDER]
local ttl = tonumber(ARGV[A_TTL])
for _, h in ipairs(redis.call('ZRANGEBYSCORE', holders, '-inf', '(' .. now)) do
  redis.call('DEL', base .. ':runs:' .. h)
  redis.call('ZREM', holders, h)
end
redis.call('ZADD', holders, now + ttl, holder)
local live = redis.call('ZRANGE', holders, 0, -1)
local conc, ival, tol = tonumber(ARGV[A_CONC]), tonumber(ARGV[A_IVAL]), tonumber(ARGV[A_TOL])
local used, tats, late, granted, closed = {}, {}, {}, {}, {}
for i = 1, n do
  local k = ARGV[A_FIXED + i]
  local c = closed[k]
  if c == nil then
    local ck = base .. ':closed:' .. k
    local why = redis.call('GET', ck)
    c = why and ('c:' .. redis.call('PTTL', ck) .. ':' .. why) or false
    closed[k] = c
  end
  local ok = not c
  if c then out[i] = c end
  if ok and conc > 0 then
    local u = used[k]
    if u == nil then
      u = 0
      for _, h in ipairs(live) do u = u + (tonumber(redis.call('HGET', base .. ':runs:' .. h, k)) or 0) end
    end
    used[k] = u
    if u >= conc then out[i], ok = 'n', false end
  end
  if ok and ival > 0 then
    local t = tats[k] or tonumber(redis.call('GET', base .. ':tat:' .. k)) or 0
    if t < now_v then t = now_v end
    local wait = t - now_v - tol
    if wait > 0 then
      -- Later starts refused wait one interval more each: they come back
      -- in their order, at the rate.
      out[i], ok = 'r:' .. num(math.ceil((wait + (late[k] or 0) * ival) / 1000)), false
      late[k] = (late[k] or 0) + 1
    else
      t = t + ival
    end
    tats[k] = t
  end
  if ok then
    used[k] = (used[k] or 0) + 1
    granted[k] = (granted[k] or 0) + 1
    out[i] = 'ok'
  end
end
local rk = base .. ':runs:' .. holder
for k, g in pairs(granted) do redis.call('HINCRBY', rk, k, g) end
redis.call('PEXPIRE', rk, ttl)
for k, t in pairs(tats) do
  redis.call('SET', base .. ':tat:' .. k, num(t), 'PX', math.max(1, math.ceil((t - now_v) / 1000)))
end
return reply(out)
