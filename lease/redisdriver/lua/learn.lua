-- KEYS: none but the limit's (in base). ARGV (learnArgs): base, key (the
-- budget), max (starts a second, 0: none), start (the rate before any
-- answer), the rate an answer said (0: none), too_many (0|1), source.
-- limit.lua's base:bound:KEY says when a run near the head of the line was
-- last refused for the rate: only then is the rate what holds runs back,
-- and may be raised.
-- base:auto:KEY (hash) is the budget's learned rate: rate (starts a
-- second), src (what it was learned from), knee (the rate the last 429
-- came at; 0: none yet), at (ms: the last change), cut
-- (ms: the last 429 that cut it), said (ms: when an answer last said the
-- rate). The rules are driver.AutoMargin's.
local now = math.floor(now_us() / 1000)
local k = ARGV[A_BASE] .. ':auto:' .. ARGV[A_KEY]
local cap, start = tonumber(ARGV[A_MAX]), tonumber(ARGV[A_START])
local said, too_many = tonumber(ARGV[A_RATE]), ARGV[A_TOO_MANY] == '1'
local st = redis.call('HMGET', k, 'rate', 'knee', 'at', 'cut', 'said')
local rate, knee = tonumber(st[1]) or start, tonumber(st[2]) or 0
local at, cut, said_at = tonumber(st[3]) or 0, tonumber(st[4]) or 0, tonumber(st[5]) or 0
local src
if said > 0 then
  rate, said_at, src = said * AUTO_MARGIN, now, ARGV[A_SOURCE]
elseif too_many then
  if now - cut < AUTO_HOLD_MS then return 0 end
  local cut_by = AUTO_DECREASE
  if now - cut < 4 * AUTO_HOLD_MS then cut_by = AUTO_DECREASE_AGAIN end -- a cut did not stop them
  knee, rate, cut, src = rate, rate * cut_by, now, '429s'
elseif now - said_at >= AUTO_SAID_MS and now - at >= 2 * AUTO_HOLD_MS and now - cut >= 2 * AUTO_HOLD_MS
  and (tonumber(redis.call('GET', ARGV[A_BASE] .. ':bound:' .. ARGV[A_KEY])) or 0) >= now - 2 * AUTO_HOLD_MS then
  if knee == 0 then
    rate, src = rate * 2, 'answers without a 429'
  elseif rate < knee * AUTO_MARGIN * (1 - AUTO_PROBE) then
    rate, src = rate + (knee * AUTO_MARGIN - rate) * AUTO_RECOVER, 'answers since a 429'
  else
    rate, src = math.max(rate, knee * AUTO_MARGIN) + knee * AUTO_PROBE, 'answers since a 429'
  end
else
  return 0
end
if cap > 0 then rate = math.min(rate, cap) end
rate = math.max(rate, AUTO_FLOOR)
redis.call('HSET', k, 'rate', tostring(rate), 'knee', tostring(knee), 'at', now, 'cut', cut, 'said', said_at, 'src', src)
redis.call('PEXPIRE', k, LINE_TTL_MS)
return 1
