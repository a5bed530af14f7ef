-- KEYS: entities (the task's hash). ARGV: for each lease: field, token, ttl_ms.
-- Returns for each '1' when renewed, '0' when the lease expired or is held under
-- another token.
local now_ms = math.floor(now_us() / 1000)
local out = {}
local vals = redis.call('HMGET', KEYS[1], unpack(fields(1, 3)))
local writes = {}
for i = 1, #ARGV / 3 do
  local b = 1 + 3 * (i - 1)
  local v = vals[i]
  out[i] = '0'
  if v then
    local pre, tok, exp, rest = string.match(v, '^([^|]*|[^|]*|)([^|]*)|(%d*)(.*)$')
    if tok == ARGV[b + 1] and is_held(tok, exp, now_ms) then
      writes[#writes + 1] = ARGV[b]
      writes[#writes + 1] = pre .. tok .. '|' .. num(now_ms + tonumber(ARGV[b + 2])) .. rest
      out[i] = '1'
    end
  end
end
if #writes > 0 then redis.call('HSET', KEYS[1], unpack(writes)) end
return reply(out)
