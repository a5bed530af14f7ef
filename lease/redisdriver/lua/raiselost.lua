-- KEYS: epoch (a bucket's). ARGV (raiseLostArgs): lost_at_ms.
-- A reshard moved a task's entities into this bucket from buckets whose
-- Redis lost data at lost_at_ms: ticks before it may have run there, and
-- their records are gone, so they are refused here too (acquire's
-- tick < lost_at). Returns 1 when it raised it, else 0.
local v = redis.call('GET', KEYS[1])
local ep = v and decode_epoch(v)
local at = ARGV[A_LOST_AT]
if not ep or tonumber(ep.lost_at) >= tonumber(at) then return 0 end
ep.lost_at = at
redis.call('SET', KEYS[1], encode_epoch(ep))
return 1
