-- KEYS: epoch, due, dueinfo, then lease_i, state_i for each entity.
-- ARGV: max_ttl_ms, state_ttl_ms, holder, then for each entity:
--   token, ttl_ms, reason, tick_ms (0: not a tick run), queue (0|1), member, claim
-- Returns for each entity a flat group of 4:
--   'ok', fence, now_ms, ''        granted
--   'busy', holder, since_ms, fence_of_holder (queue flag set when asked)
--   'ran', last_tick_ms, '', ''    a run for a tick >= this one already started
--   'quarantine', ms_left, '', ''
local now = now_us()
local now_ms = math.floor(now / 1000)
local max_ttl, state_ttl, holder = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local q = quarantine(KEYS[1], now_ms, max_ttl)
local out = {}
local n = (#KEYS - 3) / 2
for i = 0, n - 1 do
  local lk, sk = KEYS[4 + 2 * i], KEYS[5 + 2 * i]
  local b = 4 + 7 * i
  local token, ttl, reason = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  local tick, queue, member, claim = tonumber(ARGV[b + 3]), ARGV[b + 4], ARGV[b + 5], ARGV[b + 6]
  local st = redis.call('HMGET', sk, 'tick', 'fence')
  local last_tick, last_fence = tonumber(st[1] or '0'), tonumber(st[2] or '0')
  local cur = redis.call('HMGET', lk, 'holder', 'since', 'fence')
  if q > 0 then
    table.insert(out, 'quarantine'); table.insert(out, q); table.insert(out, ''); table.insert(out, '')
  elseif tick > 0 and last_tick >= tick then
    table.insert(out, 'ran'); table.insert(out, num(last_tick)); table.insert(out, ''); table.insert(out, '')
  elseif cur[1] then
    if queue == '1' then
      redis.call('HSET', sk, 'followup', '1')
      redis.call('PEXPIRE', sk, state_ttl)
    end
    ack(KEYS[2], KEYS[3], member, claim)
    table.insert(out, 'busy'); table.insert(out, cur[1]); table.insert(out, cur[2]); table.insert(out, cur[3])
  else
    -- Fences outlive every key: the server clock in microseconds keeps them
    -- increasing after the state expired or Redis lost its data.
    local fence = math.max(last_fence + 1, now)
    redis.call('HSET', lk, 'token', token, 'holder', holder, 'since', num(now_ms),
      'fence', num(fence), 'reason', reason, 'tick', num(tick))
    redis.call('PEXPIRE', lk, ttl)
    redis.call('HSET', sk, 'fence', num(fence))
    if tick > 0 then redis.call('HSET', sk, 'tick', num(tick)) end
    redis.call('PEXPIRE', sk, state_ttl)
    table.insert(out, 'ok'); table.insert(out, num(fence)); table.insert(out, num(now_ms)); table.insert(out, '')
  end
end
return out
