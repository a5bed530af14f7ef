-- KEYS: epoch, due, dueinfo, entities (the task's hash).
-- ARGV: max_ttl_ms, holder (escaped), member_prefix (escaped task .. ':'),
--   ttl_ms, reason, tick_ms (0: not a tick run), queue (0|1) -- shared by
--   the batch -- then for each entity: field, token, from ('' or
--   "claim|tick_ms" of the due entry the run carries out)
-- Returns one element per entity:
--   fence                          granted (digits only)
--   'busy|since_ms|fence|holder'   held (the follow-up flag set when asked)
--   'ran|last_tick_ms'             a run for a tick >= this one already started
--   'quarantine|ms_left'
--   'early|ms_until_tick'          the tick is still in Redis's future
--
-- This is the fan-out's hot path (README, "Speed"): one HMGET reads the whole
-- batch and one HSET writes it. cur holds what this call already wrote, so
-- an entity asked for twice in one batch is granted once.
local ARGV = ARGV
local now = now_us()
local now_ms = math.floor(now / 1000)
local now_s, now_ms_s = num(now), num(now_ms)
local max_ttl, holder, mprefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local early_ms = 500
local q, lost_at = quarantine(KEYS[1], now_ms, max_ttl)
local out = {}
local n = (#ARGV - 7) / 3
if q > 0 then
  for i = 1, n do out[i] = 'quarantine|' .. num(q) end
  return reply(out)
end
local ttl, reason, tick_s, queue = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local tick = tonumber(tick_s)
local exp_s = num(now_ms + ttl)
local early, lost
if tick > now_ms + early_ms then
  -- A replica whose clock runs ahead must not start a tick before the
  -- others could: Redis's clock decides when a tick has come.
  early = 'early|' .. num(tick - now_ms)
elseif tick > 0 and tick < lost_at then
  -- The tick may have run before Redis lost its records: never twice.
  lost = 'ran|' .. num(lost_at)
end
if early or lost then
  for i = 1, n do out[i] = early or lost end
  return reply(out)
end
local vals = redis.call('HMGET', KEYS[4], unpack(fields(8, 3)))
local cur, writes, nw = {}, {}, 0
for i = 1, n do
  local b = 8 + 3 * (i - 1)
  local field, claim, run_tick = ARGV[b], '', tick_s
  if ARGV[b + 2] ~= '' then
    local c, t = string.match(ARGV[b + 2], '^([^|]*)|(%d+)$')
    claim = c
    if tick == 0 then run_tick = t end
  end
  local v = cur[field] or vals[i]
  local lt_s, f_s, tok, exp, fu = head(v)
  local lt = 0
  if tick > 0 then lt = tonumber(lt_s) end
  local nv
  if tick > 0 and lt >= tick then
    out[i] = 'ran|' .. lt_s
  elseif is_held(tok, exp, now_ms) then
    local since, _, h = grant(v)
    if queue == '1' and fu ~= '1' then
      local p = #lt_s + #f_s + #tok + #exp + 5
      nv = string.sub(v, 1, p - 1) .. '1' .. string.sub(v, p + #fu)
    end
    out[i] = 'busy|' .. since .. '|' .. f_s .. '|' .. h
  else
    -- Fences outlive every key: the server clock in microseconds keeps
    -- them increasing after a sweep or after Redis lost its data.
    local fence = now_s
    if f_s ~= '0' and tonumber(f_s) >= now then fence = num(tonumber(f_s) + 1) end
    if tick > lt then lt_s = tick_s end
    nv = lt_s .. '|' .. fence .. '|' .. ARGV[b + 1] .. '|' .. exp_s .. '|' .. fu .. '|' .. now_ms_s .. '|' ..
      reason .. '|' .. run_tick .. '|' .. holder .. tail(v)
    out[i] = fence
  end
  if nv then
    cur[field] = nv
    writes[nw + 1], writes[nw + 2], nw = field, nv, nw + 2
  end
  -- A due entry is done with once granted, or once it became a follow-up.
  if claim ~= '' and not string.find(out[i], '^ran') then ack(KEYS[2], KEYS[3], mprefix .. field, claim) end
end
if nw > 0 then redis.call('HSET', KEYS[4], unpack(writes)) end
return reply(out)
