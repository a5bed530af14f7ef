-- KEYS: entities (the task's hash). ARGV: field, by (escaped).
-- Force-releases the lease whatever its token and records it as the last
-- run, "unlocked|since|now|fence|reason|by"; returns {holder, since, fence}
-- of the lease removed, or {} when none was held.
local now_ms = math.floor(now_us() / 1000)
local now_ms_s = num(now_ms)
local v = redis.call('HGET', KEYS[1], ARGV[1])
local lt_s, f_s, tok, exp, fu = head(v)
if not is_held(tok, exp, now_ms) then return {} end
local since, reason, holder = grant(v)
redis.call('HSET', KEYS[1], ARGV[1], lt_s .. '|' .. f_s .. '||0|' .. fu .. '|' .. now_ms_s .. '|||#unlocked|' ..
  since .. '|' .. now_ms_s .. '|' .. f_s .. '|' .. reason .. '|' .. ARGV[2])
return {holder, since, f_s}
