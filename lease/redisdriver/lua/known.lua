-- KEYS: replicas. ARGV (knownArgs): task (escaped).
-- Returns 1 when a replica whose announcement is current runs the task.
local now_ms = math.floor(now_us() / 1000)
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local a = decode_announce(all[i + 1])
  if a and tonumber(a.until_ms) >= now_ms and string.find(' ' .. a.tasks .. ' ', ' ' .. ARGV[A_TASK] .. ' ', 1, true) then
    return 1
  end
end
return 0
