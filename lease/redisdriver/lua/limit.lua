-- KEYS: the limit's bucket epoch, its holders (zset: holder → until ms).
-- ARGV (limitArgs): max_ttl_ms, holder, ttl_ms, base (the limit's key
-- prefix), concurrency (0: none), interval_us and tolerance_us (the rate's
-- GCRA: 0 interval for none), then one key, waiter, since_ms triple per
-- start asked for: the budget key ("": the limit's one budget, else an
-- escaped entity), who waits (TASK/ENTITY, escaped), and since when (0:
-- now).
-- Every run that asks waits in line, per budget key (base:q:KEY, a zset
-- waiter → since ms, the older since kept), and is granted a start when its
-- place in the line is within the budget's room: not closed, fewer runs
-- than the concurrency over every live holder (base:runs:HOLDER, a hash of
-- runs by key, kept while its holder renews it), and a start at the rate
-- (base:tat:KEY, the theoretical arrival time in us). The places of runs
-- ahead that did not ask in this call are kept for them: they ask again
-- within the wait they were told. base:seen ("KEY WAITER" → the ms by which
-- it must ask again, WAIT_GRACE_MS after that wait) lets a run that never
-- comes back leave the line; base:since ("KEY WAITER" → since) is the
-- whole line, oldest first, for the metrics. Answers, space-joined: ok,
-- n:WAIT_MS (full), r:WAIT_MS (rate), c:LEFT_MS:WHY (closed), q:LEFT_MS
-- (a data loss: nothing is granted for max_ttl, as for leases).
local now_v = now_us()
local now = math.floor(now_v / 1000)
local n = (#ARGV - A_FIXED) / 3
local out = {}
local q = quarantine(KEYS[1], now, tonumber(ARGV[A_MAX_TTL]))
if q > 0 then
  for i = 1, n do out[i] = 'q:' .. num(q) end
  return reply(out)
end
local holders, base, holder = KEYS[2], ARGV[A_BASE], ARGV[A_HOLDER]
local seen, since_all = base .. ':seen', base .. ':since'
local ttl = tonumber(ARGV[A_TTL])
for _, h in ipairs(redis.call('ZRANGEBYSCORE', holders, '-inf', '(' .. now)) do
  redis.call('DEL', base .. ':runs:' .. h)
  redis.call('ZREM', holders, h)
end
redis.call('ZADD', holders, now + ttl, holder)
local live = redis.call('ZRANGE', holders, 0, -1)

-- Runs that did not ask again in time leave the line.
local function leave(k, w)
  local m = k .. ' ' .. w
  redis.call('ZREM', base .. ':q:' .. k, w)
  redis.call('ZREM', seen, m)
  redis.call('ZREM', since_all, m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. now, 'LIMIT', 0, 256)) do
  local sp = string.find(m, ' ', 1, true)
  if sp then leave(string.sub(m, 1, sp - 1), string.sub(m, sp + 1)) else redis.call('ZREM', seen, m) end
end

-- Every ask takes its place first, so the ranks below are one line's.
local ks, ws = {}, {}
for i = 1, n do
  local k, w = ARGV[A_FIXED + 3 * i - 2], ARGV[A_FIXED + 3 * i - 1]
  local since = tonumber(ARGV[A_FIXED + 3 * i])
  if since <= 0 then since = now end
  ks[i], ws[i] = k, w
  redis.call('ZADD', base .. ':q:' .. k, 'LT', since, w)
  redis.call('ZADD', since_all, 'LT', since, k .. ' ' .. w)
end

local conc, ival, tol = tonumber(ARGV[A_CONC]), tonumber(ARGV[A_IVAL]), tonumber(ARGV[A_TOL])
local HUGE = 1e15
local free, avail, tat0, tats, closed, granted, waits = {}, {}, {}, {}, {}, {}, {}
-- room computes key k's room once a call: free places under the
-- concurrency, and starts the rate allows now.
local function room(k)
  if free[k] then return end
  free[k], avail[k] = HUGE, HUGE
  if conc > 0 then
    local u = 0
    for _, h in ipairs(live) do u = u + (tonumber(redis.call('HGET', base .. ':runs:' .. h, k)) or 0) end
    free[k] = math.max(conc - u, 0)
  end
  if ival > 0 then
    local t = tonumber(redis.call('GET', base .. ':tat:' .. k)) or 0
    if t < now_v then t = now_v end
    tat0[k], tats[k] = t, t
    avail[k] = 0
    if now_v + tol >= t then avail[k] = math.floor((now_v + tol - t) / ival) + 1 end
  end
end
for i = 1, n do
  local k, w = ks[i], ws[i]
  local c = closed[k]
  if c == nil then
    local ck = base .. ':closed:' .. k
    local why = redis.call('GET', ck)
    c = why and { redis.call('PTTL', ck), why } or false
    closed[k] = c
  end
  local wait = 0
  if c then
    out[i], wait = 'c:' .. c[1] .. ':' .. c[2], math.max(tonumber(c[1]), 0)
  else
    room(k)
    local rank = redis.call('ZRANK', base .. ':q:' .. k, w)
    if granted[k .. ' ' .. w] then rank = HUGE end -- one task and entity asked twice: once
    if rank < free[k] and rank < avail[k] then
      out[i] = 'ok'
      granted[k .. ' ' .. w] = k
      if ival > 0 then tats[k] = tats[k] + ival end
    elseif rank >= free[k] then
      local ahead = math.min(rank - free[k], HUGE)
      wait = math.min(FULL_POLL_MS + math.floor(ahead / math.max(conc, 1)) * FULL_POLL_MS, MAX_FULL_WAIT_MS)
      out[i] = 'n:' .. num(wait)
    else
      wait = math.ceil((tat0[k] + rank * ival - tol - now_v) / 1000)
      out[i] = 'r:' .. num(wait)
    end
  end
  if out[i] ~= 'ok' then waits[k .. ' ' .. w] = now + wait + WAIT_GRACE_MS end
end
for m, until_ms in pairs(waits) do
  if not granted[m] then redis.call('ZADD', seen, num(until_ms), m) end
end
local rk = base .. ':runs:' .. holder
local got = {}
for m, k in pairs(granted) do
  leave(k, string.sub(m, #k + 2))
  got[k] = (got[k] or 0) + 1
end
for k, g in pairs(got) do redis.call('HINCRBY', rk, k, g) end
redis.call('PEXPIRE', rk, ttl)
-- The line's keys outlive no use by more than LINE_TTL_MS: a limit the
-- config no longer names leaves nothing behind for good.
local lines = {}
for i = 1, n do lines[ks[i]] = true end
for k in pairs(lines) do redis.call('PEXPIRE', base .. ':q:' .. k, LINE_TTL_MS) end
redis.call('PEXPIRE', seen, LINE_TTL_MS)
redis.call('PEXPIRE', since_all, LINE_TTL_MS)
for k, t in pairs(tats) do
  if t > tat0[k] then
    redis.call('SET', base .. ':tat:' .. k, num(t), 'PX', math.max(1, math.ceil((t - now_v) / 1000)))
  end
end
return reply(out)
