-- KEYS: lease, state, due, dueinfo.
-- ARGV: token, state_ttl_ms, outcome, start_ms, end_ms, replica, member, claim,
--       next_reason ('' for none), next_delay_ms, next_attempt, tick_ms
-- Returns {'notheld'} without touching anything when the token does not hold
-- the lease (a taken-over holder must not release the new holder's lease),
-- else {'ok', followup (0|1)}.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return {'notheld', 0}
end
local now = now_us()
local now_ms = math.floor(now / 1000)
local l = redis.call('HMGET', KEYS[1], 'fence', 'reason')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'last_outcome', ARGV[3], 'last_start', ARGV[4], 'last_end', ARGV[5],
  'last_replica', ARGV[6], 'last_fence', l[1] or '0', 'last_reason', l[2] or '')
local fu = redis.call('HGET', KEYS[2], 'followup')
redis.call('HDEL', KEYS[2], 'followup')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
local member = ARGV[7]
ack(KEYS[3], KEYS[4], member, ARGV[8])
if ARGV[9] ~= '' then
  add_due(KEYS[3], KEYS[4], member, ARGV[9], now_ms + tonumber(ARGV[10]), ARGV[11], ARGV[12])
elseif fu then
  add_due(KEYS[3], KEYS[4], member, 'queued', now_ms, '0', ARGV[12])
end
if fu then return {'ok', 1} end
return {'ok', 0}
