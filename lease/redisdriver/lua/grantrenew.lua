-- KEYS: entities (the task's hash), the shard's layout key (shards_refused).
-- ARGV (grantArgs): the shard count, then per grant of a chunk: its record's
--   field or the field of one of its entities (by_grant), its token prefix, and the mask of the
--   positions to renew, then (grantTTL) the TTL, ms.
-- Renews a live grant whose chunk's record holds those positions: its
-- expiry moves to now + TTL. Answers per grant the mask of the positions
-- it renewed: the others (detached into their own values: revoked,
-- replaced; an expired grant; an entity in no record) are left to
-- renew.lua.
if shards_refused(KEYS[#KEYS], ARGV[A_SHARDS]) then return redis.error_reply(SHARDS_CHANGED) end
local now_ms = math.floor(now_us() / 1000)
local exp = struct.pack(REC.exp, now_ms + tonumber(ARGV[A_TTL]))
return reply(by_grant(KEYS[1], now_ms, function(v)
  return sub(v, 1, REC.exp_at - 1) .. exp .. sub(v, REC.exp_at + #exp)
end))
