-- KEYS: the pauses' infos (a hash). ARGV (endPauseArgs): task, info.
-- Removes task's pause info if it is still info (a pause whose end
-- passed), and answers 1; 0 when another pause replaced it since.
if redis.call('HGET', KEYS[1], ARGV[A_TASK]) ~= ARGV[A_INFO] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[A_TASK])
return 1
