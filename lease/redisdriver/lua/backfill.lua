-- KEYS: the backfills (a hash: id, its record; id|h, its holder and until
-- (ms); id|c, who cancelled it). ARGV (backfillArgs): id, then for a save
-- its record, the holder and the hold (ms; 0: none), or for a cancel ""
-- and who cancels it.
-- A save answers 1, or 0, writing nothing, when the backfill was cancelled
-- or another holder's hold has not passed. A cancel answers 1, or 0 when
-- there is no such backfill.
local id, rec, who = ARGV[A_ID], ARGV[A_RECORD], ARGV[A_HOLDER]
if rec == '' then
  if redis.call('HEXISTS', KEYS[1], id) == 0 then return 0 end
  redis.call('HSETNX', KEYS[1], id .. '|c', who)
  return 1
end
if redis.call('HEXISTS', KEYS[1], id .. '|c') == 1 then return 0 end
local now = math.floor(now_us() / 1000)
local h = redis.call('HGET', KEYS[1], id .. '|h')
if h then
  local holder, till = match(h, '^(.*)|(%d+)$')
  if holder ~= who and tonumber(till) > now then return 0 end
end
redis.call('HSET', KEYS[1], id, rec)
local hold = tonumber(ARGV[A_HOLD])
if hold > 0 then
  redis.call('HSET', KEYS[1], id .. '|h', who .. '|' .. num(now + hold))
else
  redis.call('HDEL', KEYS[1], id .. '|h')
end
return 1
