-- KEYS: due, dueinfo, then lease_i, last_i, followup_i per lease.
-- ARGV: state_ttl_ms, replica, then for each lease:
--   token, outcome, start_ms, end_ms, member, claim,
--   next_reason ('' for none), next_delay_ms, next_attempt, tick_ms
-- A lease whose token does not hold it is left alone (a taken-over holder
-- must not release the new holder's lease): 'notheld'. Otherwise the lease is
-- deleted, the run recorded as "outcome|start|end|fence|reason|replica", the
-- due claim acked, and Next or a requested follow-up enqueued: 'ok' or 'fu'.
local now_ms = math.floor(now_us() / 1000)
local state_ttl, replica = ARGV[1], ARGV[2]
local out = {}
local n = (#KEYS - 2) / 3
for i = 0, n - 1 do
  local lk, rk, fk = KEYS[3 + 3 * i], KEYS[4 + 3 * i], KEYS[5 + 3 * i]
  local b = 3 + 10 * i
  local token = ARGV[b]
  local v = redis.call('GET', lk)
  if not holds(v, token) then
    out[#out + 1] = 'notheld'
  else
    local _, fence, reason = parse_lease(v)
    redis.call('DEL', lk)
    redis.call('SET', rk, ARGV[b + 1] .. '|' .. ARGV[b + 2] .. '|' .. ARGV[b + 3] .. '|' .. fence .. '|' .. reason .. '|' .. replica, 'PX', state_ttl)
    local fu = redis.call('DEL', fk)
    local member = ARGV[b + 4]
    ack(KEYS[1], KEYS[2], member, ARGV[b + 5])
    if ARGV[b + 6] ~= '' then
      add_due(KEYS[1], KEYS[2], member, ARGV[b + 6], now_ms + tonumber(ARGV[b + 7]), ARGV[b + 8], ARGV[b + 9])
    elseif fu == 1 then
      add_due(KEYS[1], KEYS[2], member, 'queued', now_ms, '0', ARGV[b + 9])
    end
    if fu == 1 then out[#out + 1] = 'fu' else out[#out + 1] = 'ok' end
  end
end
return out
