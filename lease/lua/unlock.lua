-- KEYS: entities (the task's hash). ARGV: field, by (escaped).
-- Force-releases the lease whatever its token and records it as the last
-- run, outcome OUTCOME_UNLOCKED, ended now, by whom; returns {holder, since,
-- fence} of the lease removed, or {} when none was held.
local now_ms = math.floor(now_us() / 1000)
local now_ms_s = num(now_ms)
local e = entity(redis.call('HGET', KEYS[1], ARGV[1]))
if not is_held(e, now_ms) then return {} end
local holder, since = e.holder, e.touched
e.last = encode_run({outcome = OUTCOME_UNLOCKED, start = since, ['end'] = now_ms_s, fence = e.fence,
  reason = e.reason, replica = ARGV[2]})
free(e, now_ms_s)
redis.call('HSET', KEYS[1], ARGV[1], encode_entity(e))
return {holder, since, e.fence}
