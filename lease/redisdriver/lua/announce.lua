-- KEYS: replicas. ARGV (announceArgs): replica (escaped), ttl_ms, tasks (escaped,
-- space-joined), process (this process's nonce), host, version (escaped),
-- last_ms (this process's previous announcement, 0 for none).
-- Records which tasks this replica runs, until now + ttl (Redis's clock),
-- and forgets the replicas whose announcement ran out. Returns
-- 'ok|same|live|now_ms', or 'dup|host|since_ms|same|live|now_ms' when this
-- process announced before and finds another's announcement in its place:
-- two live replicas share one replica_id. same counts the live replicas
-- that announced exactly these tasks (this one too), live all of them: the
-- replicas share the due polls by them (Go's pollShare). (A process
-- restarted under the same id finds its predecessor's at its first
-- announcement, which is no duplicate.) A negative ttl withdraws this
-- process's announcement, and no other's.
local now_ms = math.floor(now_us() / 1000)
local now_s = num(now_ms)
local old = redis.call('HGET', KEYS[1], ARGV[A_REPLICA])
old = old and decode_announce(old)
local since, dup = now_s, nil
if tonumber(ARGV[A_TTL]) < 0 then
  -- A withdrawal, at a graceful stop: this process's announcement only.
  if old and old.process == ARGV[A_PROCESS] then redis.call('HDEL', KEYS[1], ARGV[A_REPLICA]) end
  return 'ok|' .. now_s
end
if old and tonumber(old.until_ms) >= now_ms then
  if old.process == ARGV[A_PROCESS] then
    since = old.since_ms
  elseif old.process ~= '' and ARGV[A_LAST] ~= '0' then
    -- Another process overwrote this one's announcement since it was made.
    dup = 'dup|' .. old.host .. '|' .. old.since_ms .. '|'
  end
end
redis.call('HSET', KEYS[1], ARGV[A_REPLICA], encode_announce({until_ms = num(now_ms + tonumber(ARGV[A_TTL])), tasks = ARGV[A_TASKS],
  process = ARGV[A_PROCESS], host = ARGV[A_HOST], version = ARGV[A_VERSION], since_ms = since, seen_ms = now_s}))
local all, same, live = redis.call('HGETALL', KEYS[1]), 0, 0
for i = 1, #all, 2 do
  local a = decode_announce(all[i + 1])
  if not a or tonumber(a.until_ms) < now_ms then
    redis.call('HDEL', KEYS[1], all[i])
  else
    live = live + 1
    if a.tasks == ARGV[A_TASKS] then same = same + 1 end
  end
end
return (dup or 'ok|') .. same .. '|' .. live .. '|' .. now_s
