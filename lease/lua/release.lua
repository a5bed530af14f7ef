-- KEYS: due, dueinfo, entities (the task's hash).
-- ARGV: member_prefix (escaped task .. ':'), then for each lease:
--   field, token, last, next
-- last is the run record "outcome|start|end|fence|reason|replica", packed by
-- the holder (its token proves the fence and reason are this lease's); next
-- is '' or "reason|delay_ms|attempt". A next or follow-up carries the run's
-- tick, which the grant stored.
-- A lease whose token does not hold it is left alone (a taken-over holder
-- must not release the new holder's lease): 'notheld'. Otherwise the lease is
-- freed, the run recorded, and next or a requested follow-up enqueued: 'ok'
-- or 'fu'.
local ARGV = ARGV
local now_ms = math.floor(now_us() / 1000)
local now_ms_s = num(now_ms)
local mprefix = ARGV[1]
local out = {}
local n = (#ARGV - 1) / 4
local vals = redis.call('HMGET', KEYS[3], unpack(fields(2, 4)))
local cur, writes, nw = {}, {}, 0
for i = 1, n do
  local b = 2 + 4 * (i - 1)
  local field = ARGV[b]
  local v = cur[field] or vals[i]
  -- pre is "last_tick|fence|", kept; the rest is the lease, freed.
  local pre, tok, exp, fu
  if v then pre, tok, exp, fu = string.match(v, '^(%d*|%d*|)([^|]*)|(%d*)|(%d?)|') end
  if not pre or tok ~= ARGV[b + 1] or not is_held(tok, exp, now_ms) then
    out[i] = 'notheld'
  else
    local nv = pre .. '|0|0|' .. now_ms_s .. '|||#' .. ARGV[b + 2]
    cur[field] = nv
    writes[nw + 1], writes[nw + 2], nw = field, nv, nw + 2
    local nxt = ARGV[b + 3]
    if nxt ~= '' or fu == '1' then
      local member, run_tick = mprefix .. field, run_tick(v)
      if nxt ~= '' then
        local r, d, a = string.match(nxt, '^([^|]*)|(%d+)|(%d+)$')
        add_due(KEYS[1], KEYS[2], member, r, now_ms + tonumber(d), a, run_tick)
      else
        add_due(KEYS[1], KEYS[2], member, 'queued', now_ms, '0', run_tick)
      end
    end
    if fu == '1' then out[i] = 'fu' else out[i] = 'ok' end
  end
end
if nw > 0 then redis.call('HSET', KEYS[3], unpack(writes)) end
return reply(out)
