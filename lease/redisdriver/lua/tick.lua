-- KEYS: the task's tick list (newest first; history.go describes its
-- elements).
-- ARGV (tickArgs): tick (Unix ms), replica (escaped), part, keep (records), oldest
-- (Unix ms: a record for an older tick goes), age_ms (the list's expiry).
-- Puts the part in the tick's record, over the replica's earlier part, or
-- starts the record in its place by tick. A tick older than the TICK_SCAN
-- newest records is too late: dropped (answer 0). Then the list is cut to
-- keep records and to ticks from oldest.
local key, rep = KEYS[1], ARGV[A_REPLICA] .. '|'
local tick, part = tonumber(ARGV[A_TICK]), ARGV[A_PART]
local head = redis.call('LRANGE', key, 0, TICK_SCAN - 1)
local done = false
for i, el in ipairs(head) do
  local sp = string.find(el, ' ', 1, true) or (#el + 1)
  local t = tonumber(string.sub(el, 1, sp - 1))
  if t == tick then
    local parts, found = { string.sub(el, 1, sp - 1) }, false
    for p in string.gmatch(string.sub(el, sp + 1), '[^ ]+') do
      if string.sub(p, 1, #rep) == rep then p, found = part, true end
      parts[#parts + 1] = p
    end
    if not found then parts[#parts + 1] = part end
    redis.call('LSET', key, i - 1, table.concat(parts, ' '))
    done = true
    break
  elseif t and t < tick then
    redis.call('LINSERT', key, 'BEFORE', el, ARGV[A_TICK] .. ' ' .. part)
    done = true
    break
  end
end
if not done then
  if #head >= TICK_SCAN then return 0 end
  redis.call('RPUSH', key, ARGV[A_TICK] .. ' ' .. part)
end
redis.call('LTRIM', key, 0, tonumber(ARGV[A_KEEP]) - 1)
local oldest = tonumber(ARGV[A_OLDEST])
for _ = 1, TICK_AGE_DROP do
  local el = redis.call('LINDEX', key, -1)
  if not el then break end
  local t = tonumber(string.match(el, '^%d+'))
  if t and t >= oldest then break end
  redis.call('RPOP', key)
end
redis.call('PEXPIRE', key, ARGV[A_EXPIRY])
return 1
