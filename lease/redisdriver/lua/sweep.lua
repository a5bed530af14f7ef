-- KEYS: entities (the task's hash). ARGV (sweepArgs): cursor, count, state_ttl_ms.
-- One HSCAN page: deletes the entities neither held nor touched (granted or
-- released) within state_ttl, which bounds what tickd keeps (Redis 7.0 has
-- no per-field expiry), and the chunks' records (chunk.lua) so: those
-- not held and untouched within state_ttl, and the index fields whose
-- records are gone. A value in a format this code does not know is left
-- alone. Returns {next_cursor, deleted}.
local now_ms = math.floor(now_us() / 1000)
local cutoff = now_ms - tonumber(ARGV[A_STATE_TTL])
local page = redis.call('HSCAN', KEYS[1], ARGV[A_CURSOR], 'COUNT', ARGV[A_COUNT])
local kv, dels, e = page[2], {}, {}
local ix, ixr = {}, {} -- the page's index fields and their records' fields
for i = 1, #kv, 2 do
  local mark = sub(kv[i], 1, 1)
  if mark == CHUNK_MARK then
    -- A chunk's record (chunk.lua), its grant over (released or expired)
    -- and untouched within state_ttl, as an entity's value.
    local c = decode_chunk(kv[i + 1])
    if c and (c.held == 0 or c.exp <= now_ms) and math.max(c.since, c.ended) < cutoff then
      dels[#dels + 1] = kv[i]
    end
  elseif mark == INDEX_MARK then
    local x = decode_index(kv[i + 1])
    if x then ix[#ix + 1], ixr[#ixr + 1] = kv[i], CHUNK_MARK .. x.id end
  elseif decode_entity(kv[i + 1], e) and not is_held(e, now_ms) and tonumber(e.touched) < cutoff then
    dels[#dels + 1] = kv[i]
  end
end
-- An index whose record is gone (swept) names nothing.
if #ix > 0 then
  local got = redis.call('HMGET', KEYS[1], unpack(ixr))
  for k = 1, #ix do
    if not got[k] then dels[#dels + 1] = ix[k] end
  end
end
if #dels > 0 then redis.call('HDEL', KEYS[1], unpack(dels)) end
return {page[1], #dels}
