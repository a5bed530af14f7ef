-- KEYS: epoch, due, dueinfo, then lease_i, state_i, followup_i per entity.
-- ARGV: max_ttl_ms, state_ttl_ms, holder, then for each entity:
--   token, ttl_ms, reason, tick_ms (0: not a tick run), queue (0|1), member, claim
-- The state value is "last_tick_ms|fence"; it outlives the lease.
-- Returns one element per entity:
--   fence                          granted (digits only)
--   'busy|since_ms|fence|holder'   held (the follow-up flag set when asked)
--   'ran|last_tick_ms'             a run for a tick >= this one already started
--   'quarantine|ms_left'
--   'early|ms_until_tick'          the tick is still in Redis's future
--
-- This loop is the fan-out's hot path (README, "Speed"): strings are reused
-- rather than parsed and formatted again, and a common fence is formatted
-- once per call.
local now = now_us()
local now_ms = math.floor(now / 1000)
local now_s, now_ms_s = num(now), num(now_ms)
local max_ttl, state_ttl, holder = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local early_ms = 500
local q, lost_at = quarantine(KEYS[1], now_ms, max_ttl)
local out = {}
local n = (#KEYS - 3) / 3
for i = 0, n - 1 do
  local b = 4 + 7 * i
  local tick_s = ARGV[b + 3]
  local tick = tonumber(tick_s)
  local res
  if q > 0 then
    res = 'quarantine|' .. num(q)
  elseif tick > now_ms + early_ms then
    -- A replica whose clock runs ahead must not start a tick before the
    -- others could: Redis's clock decides when a tick has come.
    res = 'early|' .. num(tick - now_ms)
  elseif tick > 0 and tick < lost_at then
    -- The tick may have run before Redis lost its records: never twice.
    res = 'ran|' .. num(lost_at)
  else
    local sk = KEYS[5 + 3 * i]
    local last_tick_s, last_tick, last_fence = '0', 0, 0
    local st = redis.call('GET', sk)
    if st then
      local a, f = string.match(st, '^(%d+)|(%d+)$')
      if a then
        last_tick_s, last_tick, last_fence = a, tonumber(a), tonumber(f)
      end
    end
    if tick > 0 and last_tick >= tick then
      res = 'ran|' .. last_tick_s
    else
      -- Fences outlive every key: the server clock in microseconds keeps
      -- them increasing after the state expired or Redis lost its data.
      local fence = now_s
      if last_fence >= now then fence = num(last_fence + 1) end
      local lk, member, claim = KEYS[4 + 3 * i], ARGV[b + 5], ARGV[b + 6]
      local v = ARGV[b] .. '|' .. now_ms_s .. '|' .. fence .. '|' .. ARGV[b + 2] .. '|' .. tick_s .. '|' .. holder
      if redis.call('SET', lk, v, 'NX', 'PX', ARGV[b + 1]) then
        if tick > last_tick then last_tick_s = tick_s end
        redis.call('SET', sk, last_tick_s .. '|' .. fence, 'PX', state_ttl)
        if claim ~= '' then ack(KEYS[2], KEYS[3], member, claim) end
        res = fence
      else
        if ARGV[b + 4] == '1' then
          redis.call('SET', KEYS[6 + 3 * i], '1', 'PX', state_ttl)
        end
        if claim ~= '' then ack(KEYS[2], KEYS[3], member, claim) end
        local since, hfence, _, _, h = parse_lease(redis.call('GET', lk))
        res = 'busy|' .. since .. '|' .. hfence .. '|' .. h
      end
    end
  end
  out[i + 1] = res
end
return out
