-- tickd's Redis fence guard: run a write only if the run's fence is the
-- highest that has written under the fence's key.
--
--   KEYS[1]  the fence's key (it holds the highest fence, a decimal)
--   KEYS[2]  the key the write touches (optional)
--   ARGV[1]  the run's fence (TICKD_FENCE)
--   ARGV[2…] the write: a command and its arguments after its key, which
--            is KEYS[2] (SET, HSET, LPUSH, XADD…); none: advance alone
--
-- A stale fence is an error reply, "STALE …", and nothing is written; an
-- equal or higher one becomes the highest and the command runs, its reply
-- returned. On a Redis Cluster, give both keys one hash tag:
-- {task/entity}:fence and {task/entity}:data.
--
--   redis-cli -e --eval guard.lua fence:KEY data:KEY , "$TICKD_FENCE" SET value
local f = ARGV[1]
if type(f) ~= 'string' or not string.match(f, '^[1-9]%d*$') or #f > 19 then
	return redis.error_reply('ERR tickd fence guard: ' .. tostring(f) .. ' is not a fence (a decimal integer of at least 1)')
end
local high = redis.call('GET', KEYS[1])
-- Decimals without leading zeros: the longer is the larger, and of the
-- same length, the one that sorts after (exact beyond 2^53, where Lua's
-- numbers are not).
if high and (#high > #f or (#high == #f and high > f)) then
	return redis.error_reply('STALE fence ' .. f .. ' under ' .. KEYS[1] .. ': ' .. high .. ' wrote')
end
if high ~= f then
	redis.call('SET', KEYS[1], f)
end
if #ARGV < 2 then
	return f
end
if not KEYS[2] then
	return redis.error_reply('ERR tickd fence guard: a write names its key as KEYS[2]')
end
return redis.call(ARGV[2], KEYS[2], unpack(ARGV, 3))
