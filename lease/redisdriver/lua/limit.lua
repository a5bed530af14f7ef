-- KEYS: the limit's bucket epoch, its holders (zset: holder → until ms).
-- ARGV (limitArgs): max_ttl_ms, holder, ttl_ms, base (the limit's key
-- prefix), concurrency (0: none), interval_us and tolerance_us (the rate's
-- GCRA: 0 interval for none), fair (1: served by group), then one part per
-- start asked for: the budget key ("": the limit's one budget, else an
-- escaped entity), who waits (TASK/ENTITY, escaped), since when (0: now),
-- its head start (ms), its group ("": not known, else "=" and the escaped
-- group) and the group's weight.
-- Every run that asks waits in line, per budget key, at since less its head
-- start (the older kept), and is granted a start when its place in the line
-- is within the budget's room: not closed, fewer runs than the concurrency
-- over every live holder (base:runs:HOLDER, a hash of runs by key, kept
-- while its holder renews it), and a start at the rate (base:tat:KEY, the
-- theoretical arrival time in us). The places of runs ahead that did not
-- ask in this call are kept for them: they ask again within the wait they
-- were told. base:seen ("KEY WAITER" → the ms by which it must ask again,
-- WAIT_GRACE_MS after that wait) lets a run that never comes back leave the
-- line; base:since ("KEY WAITER" → since) is the whole line, oldest first,
-- for the metrics.
-- The line (base:q:KEY, a zset waiter → since) is one, oldest first, unless
-- the limit is fair. A fair line is one per group (base:fq:KEY:GROUP), and
-- the groups take turns by their tags (start-time fair queuing, the
-- timestamp form of deficit round-robin): base:fg:KEY (zset group → the
-- virtual time of its next start) holds the groups with runs waiting, and a
-- start advances its group's tag by FAIR_UNIT over its weight
-- (base:fw:KEY, group → weight); a group that begins to wait starts at the
-- line's virtual time (base:fvt:KEY: the tag of the last start), or at the
-- tag it left with (base:fv:KEY) if later, so that a group's share does not
-- grow with its runs, nor by leaving and coming back. base:fm:KEY (waiter →
-- group) is each waiter's group, base:fb:KEY (group → ms) when each group
-- began to wait; base:fs:KEY:N counts each group's starts
-- in the N-th span of STARTS_BUCKET_MS, for status. Answers, space-joined: ok, n:WAIT_MS
-- (full), r:WAIT_MS (rate), c:LEFT_MS:WHY (closed), q:LEFT_MS (a data loss:
-- nothing is granted for max_ttl, as for leases).
local now_v = now_us()
local now = math.floor(now_v / 1000)
local n = (#ARGV - A_FIXED) / E_STRIDE
local out = {}
local q = quarantine(KEYS[1], now, tonumber(ARGV[A_MAX_TTL]))
if q > 0 then
  for i = 1, n do out[i] = 'q:' .. num(q) end
  return reply(out)
end
local holders, base, holder = KEYS[2], ARGV[A_BASE], ARGV[A_HOLDER]
local seen, since_all = base .. ':seen', base .. ':since'
local ttl = tonumber(ARGV[A_TTL])
local fair = ARGV[A_FAIR] == '1'
for _, h in ipairs(redis.call('ZRANGEBYSCORE', holders, '-inf', '(' .. now)) do
  redis.call('DEL', base .. ':runs:' .. h)
  redis.call('ZREM', holders, h)
end
redis.call('ZADD', holders, now + ttl, holder)
local live = redis.call('ZRANGE', holders, 0, -1)

-- A fair line's keys for budget key k.
local function fk(k, what) return base .. ':f' .. what .. ':' .. k end
local function fline(k, g) return base .. ':fq:' .. k .. ':' .. g end

-- fair_out takes waiter w out of its group's line (granted, or gone); a
-- group left with none keeps its tag for when it comes back. One gone
-- (keep) keeps its group, which it takes back when it asks again without
-- knowing it.
local function fair_out(k, w, keep)
  local fm = fk(k, 'm')
  local g = redis.call('HGET', fm, w)
  if not g then return end
  if not keep then redis.call('HDEL', fm, w) end
  local gl = fline(k, g)
  if redis.call('ZREM', gl, w) == 1 and redis.call('ZCARD', gl) == 0 then
    local f = redis.call('ZSCORE', fk(k, 'g'), g)
    if f then
      redis.call('HSET', fk(k, 'v'), g, f)
      redis.call('ZREM', fk(k, 'g'), g)
      redis.call('HDEL', fk(k, 'b'), g)
    end
    if redis.call('ZCARD', fk(k, 'g')) == 0 then
      -- No group waits: the virtual times start over.
      redis.call('DEL', fk(k, 'v'), fk(k, 'vt'))
    end
  end
end

-- Runs that did not ask again in time leave the line (either kind: a
-- reload may have made the limit fair, or not).
local function leave(k, w, keep)
  local m = k .. ' ' .. w
  redis.call('ZREM', base .. ':q:' .. k, w)
  fair_out(k, w, keep)
  redis.call('ZREM', seen, m)
  redis.call('ZREM', since_all, m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. now, 'LIMIT', 0, 256)) do
  local sp = string.find(m, ' ', 1, true)
  if sp then leave(string.sub(m, 1, sp - 1), string.sub(m, sp + 1), true) else redis.call('ZREM', seen, m) end
end

local placed = {} -- the group lines placed in, by key
-- fair_place puts waiter w in its group's line: g, or, not known (false),
-- the group it has, else "".
local function fair_place(k, w, since, g, weight)
  local fm = fk(k, 'm')
  local had = redis.call('HGET', fm, w)
  if not g then g = had or '' end
  if had and had ~= g then -- its group changed: it keeps its since
    since = math.min(since, tonumber(redis.call('ZSCORE', fline(k, had), w)) or since)
    fair_out(k, w)
  end
  local gl = fline(k, g)
  redis.call('ZADD', gl, 'LT', since, w)
  if not placed[gl] then
    placed[gl] = true
    redis.call('PEXPIRE', gl, LINE_TTL_MS)
  end
  redis.call('HSET', fm, w, g)
  if weight then redis.call('HSET', fk(k, 'w'), g, weight) end
  local fg = fk(k, 'g')
  if not redis.call('ZSCORE', fg, g) then
    local v = tonumber(redis.call('GET', fk(k, 'vt'))) or 0
    local left = tonumber(redis.call('HGET', fk(k, 'v'), g)) or 0
    redis.call('ZADD', fg, num(math.max(v, left)), g)
    redis.call('HSET', fk(k, 'b'), g, now)
  end
end

-- Every ask takes its place first, so the ranks below are one line's.
local ks, ws = {}, {}
for i = 1, n do
  local b = A_FIXED + E_STRIDE * (i - 1)
  local k, w = ARGV[b + E_KEY], ARGV[b + E_WAITER]
  local since = tonumber(ARGV[b + E_SINCE])
  if since <= 0 then since = now end
  since = since - tonumber(ARGV[b + E_HEAD])
  ks[i], ws[i] = k, w
  if fair then
    local g, weight = ARGV[b + E_GROUP], nil
    if g == '' then g = false else g, weight = string.sub(g, 2), ARGV[b + E_WEIGHT] end
    fair_place(k, w, since, g, weight)
  else
    redis.call('ZADD', base .. ':q:' .. k, 'LT', since, w)
  end
  redis.call('ZADD', since_all, 'LT', since, k .. ' ' .. w)
end

local conc, ival, tol = tonumber(ARGV[A_CONC]), tonumber(ARGV[A_IVAL]), tonumber(ARGV[A_TOL])
-- An auto limit (IVAL -1) paces each budget to the rate learned for it
-- (learn.lua's base:auto:KEY), or AUTO before any; TOL is its burst less
-- one. ivals[k] is the interval, us.
local ivals, slow, said, burst_less = {}, {}, {}, tol
local function ival_of(k)
  if ival >= 0 then return ival end
  if not ivals[k] then
    local a = redis.call('HMGET', base .. ':auto:' .. k, 'rate', 'knee', 'said')
    local r = tonumber(a[1]) or tonumber(ARGV[A_AUTO])
    local said_at = tonumber(a[3]) or 0
    ivals[k], said[k] = math.floor(1e6 / math.max(r, AUTO_FLOOR)), now - said_at < AUTO_SAID_MS
    slow[k] = (tonumber(a[2]) or 0) == 0 and not said[k]
  end
  return ivals[k]
end

-- auto_wait is how long until an auto limit's run at rank may start, us:
-- as the rate says when an answer said it; else, before the first 429 (and with no rate said) the rate may double each
-- second, so the runs
-- before it may start in log2(1 + rank ln2 / rate) seconds; after, AUTO_AHEAD
-- times sooner than the rate says.
local function auto_wait(k, rank, iv)
  if said[k] then return rank * iv end
  if slow[k] then return math.log(1 + rank * math.log(2) * iv / 1e6) / math.log(2) * 1e6 end
  return rank * iv / AUTO_AHEAD
end
local HUGE = 1e15
local free, avail, tat0, tats, tols, closed, granted, waits = {}, {}, {}, {}, {}, {}, {}, {}
-- used[k]: an auto budget's starts went at its rate until this call (the
-- arrival time it kept is less than an interval behind now), where a burst
-- after a pause finds the burst unused, whatever the rate.
local used = {}
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
  local iv = ival_of(k)
  if iv > 0 then
    local tl = tol
    if ival < 0 then tl = burst_less * iv end
    local t = tonumber(redis.call('GET', base .. ':tat:' .. k)) or 0
    used[k] = t > now_v - iv
    if t < now_v then t = now_v end
    tat0[k], tats[k], tols[k] = t, t, tl
    avail[k] = 0
    if now_v + tl >= t then avail[k] = math.floor((now_v + tl - t) / iv) + 1 end
  end
end

-- A fair line's order: the groups' runs merged by tag, a group's j-th run
-- (from 0) at its tag plus j steps (FAIR_UNIT over its weight); equal tags
-- in the groups' order. heads[k] is the first of it, as many as there is
-- room for (at most FAIR_HEAD): waiter → its group.
local heads, groups = {}, {}
local function step(k, g) return FAIR_UNIT / (tonumber(redis.call('HGET', fk(k, 'w'), g)) or 1) end
local function fair_head(k)
  if heads[k] then return heads[k] end
  local head, cand = {}, {}
  local r = math.min(free[k], avail[k], FAIR_HEAD)
  local gs = r > 0 and redis.call('ZRANGE', fk(k, 'g'), 0, r - 1, 'WITHSCORES') or {}
  for j = 1, #gs, 2 do
    cand[#cand + 1] = { g = gs[j], tag = tonumber(gs[j + 1]), step = step(k, gs[j]), at = 0 }
  end
  local got = 0
  while got < r do
    local best
    for _, c in ipairs(cand) do
      if not c.done and (not best or c.tag < best.tag) then best = c end
    end
    if not best then break end
    local w = redis.call('ZRANGE', fline(k, best.g), best.at, best.at)[1]
    if w then
      head[w], got = best.g, got + 1
      best.at, best.tag = best.at + 1, best.tag + best.step
    else
      best.done = true
    end
  end
  heads[k] = head
  return head
end

-- fair_rank is at least the number of runs ahead of w in k's fair line:
-- exact over the first 64 groups, one for each group after them.
local function fair_rank(k, w)
  local g = redis.call('HGET', fk(k, 'm'), w)
  if not g then return 0 end
  local at = redis.call('ZRANK', fline(k, g), w) or 0
  local tag = (tonumber(redis.call('ZSCORE', fk(k, 'g'), g)) or 0) + at * step(k, g)
  if not groups[k] then
    groups[k] = {}
    local gs = redis.call('ZRANGE', fk(k, 'g'), 0, 63, 'WITHSCORES')
    for j = 1, #gs, 2 do
      groups[k][#groups[k] + 1] = { g = gs[j], tag = tonumber(gs[j + 1]), step = step(k, gs[j]), n = redis.call('ZCARD', fline(k, gs[j])) }
    end
  end
  local rank, counted = at, 0
  for _, h in ipairs(groups[k]) do
    if h.tag < tag then
      counted = counted + 1
      if h.g ~= g then rank = rank + math.min(h.n, math.ceil((tag - h.tag) / h.step)) end
    end
  end
  local below = redis.call('ZCOUNT', fk(k, 'g'), '-inf', '(' .. num(tag))
  return rank + math.max(below - counted, 0)
end

-- fair_granted advances w's group (g) by one start, and the line's virtual
-- time to the start's tag.
local starts_at = math.floor(now / STARTS_BUCKET_MS)
local function fair_granted(k, g)
  local fg = fk(k, 'g')
  local tag = tonumber(redis.call('ZSCORE', fg, g))
  if not tag then return end
  -- Its start counts in the group's starts of the last minute, for status.
  local sk = fk(k, 's') .. ':' .. starts_at
  redis.call('HINCRBY', sk, g, 1)
  redis.call('PEXPIRE', sk, STARTS_BUCKET_MS * (STARTS_BUCKETS + 1))
  redis.call('ZADD', fg, num(tag + step(k, g)), g)
  if tag > (tonumber(redis.call('GET', fk(k, 'vt'))) or 0) then redis.call('SET', fk(k, 'vt'), num(tag)) end
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
    local ok, rank
    if granted[k .. ' ' .. w] then -- one task and entity asked twice: once
      ok, rank = false, HUGE
    elseif fair then
      local g = fair_head(k)[w]
      ok = g ~= nil
      if ok then fair_granted(k, g) else rank = fair_rank(k, w) end
    else
      rank = redis.call('ZRANK', base .. ':q:' .. k, w)
      ok = rank < free[k] and rank < avail[k]
    end
    local iv = ival_of(k)
    if ok then
      out[i] = 'ok'
      granted[k .. ' ' .. w] = k
      if iv > 0 then tats[k] = tats[k] + iv end
    elseif rank >= free[k] or iv == 0 then
      local ahead = math.min(math.max(rank - free[k], 0), HUGE)
      wait = math.min(FULL_POLL_MS + math.floor(ahead / math.max(conc, 1)) * FULL_POLL_MS, MAX_FULL_WAIT_MS)
      out[i] = 'n:' .. num(wait)
    else
      -- A fair line's rank is a least: a run told too soon asks again.
      local ahead = rank * iv
      if ival < 0 then
        ahead = math.floor(auto_wait(k, rank, iv)) -- the rate may rise meanwhile
        -- A run near the head refused for the rate while the starts went
        -- at it: the rate holds the runs back, and learn.lua may raise it.
        if rank <= 2 * (burst_less + 1) and used[k] then redis.call('SET', base .. ':bound:' .. k, now, 'PX', 4 * AUTO_HOLD_MS) end
      end
      wait = math.ceil((tat0[k] + ahead - tols[k] - now_v) / 1000)
      if fair then wait = math.max(wait, math.ceil(iv / 1000)) end
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
for k in pairs(lines) do
  if fair then
    for _, what in ipairs({ 'g', 'w', 'm', 'v', 'vt', 'b' }) do redis.call('PEXPIRE', fk(k, what), LINE_TTL_MS) end
  else
    redis.call('PEXPIRE', base .. ':q:' .. k, LINE_TTL_MS)
  end
end
redis.call('PEXPIRE', seen, LINE_TTL_MS)
redis.call('PEXPIRE', since_all, LINE_TTL_MS)
-- A budget's arrival time outlives itself by its burst and a second: an
-- auto limit's next call reads it to tell whether starts go at its rate.
for k, t in pairs(tats) do
  if t > tat0[k] then
    redis.call('SET', base .. ':tat:' .. k, num(t), 'PX', math.ceil((t - now_v + tols[k] + ival_of(k)) / 1000) + 1000)
  end
end
return reply(out)
