-- KEYS: entities (the task's hash), the shard's layout key (shards_refused).
-- ARGV (renewArgs): the shard count, then for each lease: field, token
-- (between its separators: lib.lua's unbar), ttl_ms.
-- Returns for each RENEWED_OK when renewed, RENEWED_REVOKED when an
-- operator revoked it (unlock.lua: the lease stays held, not renewed, until
-- the holder releases it or it expires), RENEWED_REPLACED when a newer tick
-- did (acquire.lua's replace), RENEWED_LOST when the lease
-- expired or is held under another token.
if shards_refused(KEYS[#KEYS], ARGV[A_SHARDS]) then return redis.error_reply(SHARDS_CHANGED) end
local now_ms = math.floor(now_us() / 1000)
local out = {}
local vals = redis.call('HMGET', KEYS[1], unpack(fields(A_FIXED + E_FIELD, E_STRIDE)))
local writes, e = {}, {}
for i = 1, (#ARGV - A_FIXED) / E_STRIDE do
  local b = A_FIXED + E_STRIDE * (i - 1)
  entity(vals[i], e)
  out[i] = RENEWED_LOST
  local tok = unbar(ARGV[b + E_TOKEN])
  if e.token == tok and is_held(e, now_ms) then
    e.exp = num(now_ms + tonumber(ARGV[b + E_TTL]))
    writes[#writes + 1] = ARGV[b + E_FIELD]
    writes[#writes + 1] = encode_entity(e)
    out[i] = RENEWED_OK
  elseif e.token == REVOKED .. tok and is_held(e, now_ms) then
    out[i] = RENEWED_REVOKED
  elseif e.token == REPLACED .. tok and is_held(e, now_ms) then
    out[i] = RENEWED_REPLACED
  end
end
if #writes > 0 then redis.call('HSET', KEYS[1], unpack(writes)) end
return reply(out)
