-- KEYS: epoch, due, dueinfo, then lease_i, state_i, followup_i per entity.
-- ARGV: max_ttl_ms, state_ttl_ms, holder, then for each entity:
--   token, ttl_ms, reason, tick_ms (0: not a tick run), queue (0|1), member, claim
-- The state value is "last_tick_ms|fence"; it outlives the lease.
-- Returns for each entity a flat group of 4:
--   'ok', fence, now_ms, ''        granted
--   'busy', holder, since_ms, fence_of_holder (follow-up flag set when asked)
--   'ran', last_tick_ms, '', ''    a run for a tick >= this one already started
--   'quarantine', ms_left, '', ''
--   'early', ms_until_tick, '', ''  the tick is still in Redis's future
local now = now_us()
local now_ms = math.floor(now / 1000)
local now_ms_s = num(now_ms)
local max_ttl, state_ttl, holder = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local early_ms = 500
local q, lost_at = quarantine(KEYS[1], now_ms, max_ttl)
local out = {}
local n = (#KEYS - 3) / 3
for i = 0, n - 1 do
  local lk, sk, fk = KEYS[4 + 3 * i], KEYS[5 + 3 * i], KEYS[6 + 3 * i]
  local b = 4 + 7 * i
  local token, ttl, reason = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  local tick, queue, member, claim = tonumber(ARGV[b + 3]), ARGV[b + 4], ARGV[b + 5], ARGV[b + 6]
  local last_tick, last_fence = 0, 0
  local st = redis.call('GET', sk)
  if st then
    local a, f = string.match(st, '^(%d+)|(%d+)$')
    last_tick, last_fence = tonumber(a), tonumber(f)
  end
  if q > 0 then
    out[#out + 1] = 'quarantine'; out[#out + 1] = q; out[#out + 1] = ''; out[#out + 1] = ''
  elseif tick > now_ms + early_ms then
    -- A replica whose clock runs ahead must not start a tick before the
    -- others could: Redis's clock decides when a tick has come.
    out[#out + 1] = 'early'; out[#out + 1] = num(tick - now_ms); out[#out + 1] = ''; out[#out + 1] = ''
  elseif tick > 0 and tick < lost_at then
    -- The tick may have run before Redis lost its records: never twice.
    out[#out + 1] = 'ran'; out[#out + 1] = num(lost_at); out[#out + 1] = ''; out[#out + 1] = ''
  elseif tick > 0 and last_tick >= tick then
    out[#out + 1] = 'ran'; out[#out + 1] = num(last_tick); out[#out + 1] = ''; out[#out + 1] = ''
  else
    -- Fences outlive every key: the server clock in microseconds keeps them
    -- increasing after the state expired or Redis lost its data.
    local fence = num(math.max(last_fence + 1, now))
    local v = token .. '|' .. now_ms_s .. '|' .. fence .. '|' .. reason .. '|' .. ARGV[b + 3] .. '|' .. holder
    if redis.call('SET', lk, v, 'NX', 'PX', ttl) then
      if tick > last_tick then last_tick = tick end
      redis.call('SET', sk, num(last_tick) .. '|' .. fence, 'PX', state_ttl)
      ack(KEYS[2], KEYS[3], member, claim)
      out[#out + 1] = 'ok'; out[#out + 1] = fence; out[#out + 1] = now_ms_s; out[#out + 1] = ''
    else
      if queue == '1' then
        redis.call('SET', fk, '1', 'PX', state_ttl)
      end
      ack(KEYS[2], KEYS[3], member, claim)
      local since, hfence, _, _, h = parse_lease(redis.call('GET', lk))
      out[#out + 1] = 'busy'; out[#out + 1] = h; out[#out + 1] = since; out[#out + 1] = hfence
    end
  end
end
return out
