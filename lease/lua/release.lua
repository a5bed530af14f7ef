-- KEYS: due, dueinfo, then lease_i, last_i, followup_i per lease.
-- ARGV: state_ttl_ms, then for each lease:
--   token, last, member, claim, tick_ms, next
-- last is the run record "outcome|start|end|fence|reason|replica", packed by
-- the holder (its token proves the fence and reason are this lease's); next
-- is '' or "reason|delay_ms|attempt".
-- A lease whose token does not hold it is left alone (a taken-over holder
-- must not release the new holder's lease): 'notheld'. Otherwise the lease is
-- deleted, the run recorded, the due claim acked, and next or a requested
-- follow-up enqueued: 'ok' or 'fu'.
local state_ttl = ARGV[1]
local now_ms
local out = {}
local n = (#KEYS - 2) / 3
for i = 0, n - 1 do
  local lk = KEYS[3 + 3 * i]
  local b = 2 + 6 * i
  if not holds(redis.call('GET', lk), ARGV[b]) then
    out[i + 1] = 'notheld'
  else
    redis.call('DEL', lk)
    redis.call('SET', KEYS[4 + 3 * i], ARGV[b + 1], 'PX', state_ttl)
    local fu = redis.call('DEL', KEYS[5 + 3 * i])
    local member, claim, nxt = ARGV[b + 2], ARGV[b + 3], ARGV[b + 5]
    if claim ~= '' then ack(KEYS[1], KEYS[2], member, claim) end
    if nxt ~= '' or fu == 1 then
      now_ms = now_ms or math.floor(now_us() / 1000)
      if nxt ~= '' then
        local r, d, a = string.match(nxt, '^([^|]*)|(%d+)|(%d+)$')
        add_due(KEYS[1], KEYS[2], member, r, now_ms + tonumber(d), a, ARGV[b + 4])
      else
        add_due(KEYS[1], KEYS[2], member, 'queued', now_ms, '0', ARGV[b + 4])
      end
    end
    if fu == 1 then out[i + 1] = 'fu' else out[i + 1] = 'ok' end
  end
end
return out
