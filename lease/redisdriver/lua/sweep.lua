-- KEYS: entities (the task's hash). ARGV (sweepArgs): cursor, count, state_ttl_ms.
-- One HSCAN page: deletes the entities neither held nor touched (granted or
-- released) within state_ttl, which bounds what tickd keeps (Redis 7.0 has
-- no per-field expiry). A value in a format this code does not know is left
-- alone. Returns {next_cursor, deleted}.
local now_ms = math.floor(now_us() / 1000)
local cutoff = now_ms - tonumber(ARGV[A_STATE_TTL])
local page = redis.call('HSCAN', KEYS[1], ARGV[A_CURSOR], 'COUNT', ARGV[A_COUNT])
local kv, dels, e = page[2], {}, {}
for i = 1, #kv, 2 do
  local ok = decode_entity(kv[i + 1], e)
  if ok and not is_held(e, now_ms) and tonumber(e.touched) < cutoff then
    dels[#dels + 1] = kv[i]
  end
end
if #dels > 0 then redis.call('HDEL', KEYS[1], unpack(dels)) end
return {page[1], #dels}
