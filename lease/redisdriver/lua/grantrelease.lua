-- KEYS: entities (the task's hash), the shard's layout key (shards_refused).
-- ARGV (grantArgs): the shard count, then per grant of a chunk: its record's
--   field or the field of one of its entities (by_grant), its token prefix, and the mask of the
--   positions released (their runs ended done, nothing asked for after).
-- Releases those of a live grant's positions its chunk's record holds
-- (chunk.lua): their bits leave held, the record's release time is now.
-- Answers per grant the mask of the positions it released: the others (a
-- position detached into its own value, a grant expired or replaced, an
-- entity in no record) are left to release.lua.
if shards_refused(KEYS[#KEYS], ARGV[A_SHARDS]) then return redis.error_reply(SHARDS_CHANGED) end
local now_ms = math.floor(now_us() / 1000)
return reply(by_grant(KEYS[1], now_ms, function(v, held, mask)
  return struct.pack(REC.release, u32(bit.band(held, bit.bnot(mask))), now_ms) .. sub(v, REC.exp_at)
end))
