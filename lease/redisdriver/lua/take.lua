-- KEYS: due, dueinfo. ARGV (takeArgs): limit, visibility_ms, claim_prefix.
-- Takes up to limit due entries: each is hidden for visibility_ms under a new
-- claim, and comes back if its taker never acks it.
-- Returns flat {member, info, due_ms} triples, info as encode_due writes it.
local now_ms = math.floor(now_us() / 1000)
local ms = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[A_LIMIT]))
local out = {}
for i = 1, #ms, 2 do
  local m, score = ms[i], ms[i + 1]
  local v = redis.call('HGET', KEYS[2], m)
  local d = (v and decode_due(v)) or {reason = REASON_RETRY, attempt = '0', tick = '0', reqs = ''}
  d.claim = ARGV[A_CLAIM] .. ':' .. ((i + 1) / 2)
  local info = encode_due(d)
  redis.call('ZADD', KEYS[1], num(now_ms + tonumber(ARGV[A_VISIBILITY])), m)
  redis.call('HSET', KEYS[2], m, info)
  out[#out + 1], out[#out + 2], out[#out + 3] = m, info, score
end
return out
