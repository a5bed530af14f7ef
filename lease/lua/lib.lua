-- Shared helpers, prepended to every tickd script. Times are the Redis
-- server's clock (TIME), so replicas with skewed clocks agree.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function num(x)
  return string.format('%.0f', x)
end

-- The epoch key ("quarantine_until_ms|lost_at_ms") exists from the first
-- acquire on. When it is missing, Redis lost its data (or is new): nothing is
-- granted for one maximum lease TTL, so no old holder can still trust a lease
-- that Redis has forgotten; and no tick before the loss is run again, since
-- the records of the ticks that did run are gone too.
-- Returns the quarantine left (ms) and the loss time (ms).
local function quarantine(epoch_key, now_ms, max_ttl_ms)
  local v = redis.call('GET', epoch_key)
  if not v then
    redis.call('SET', epoch_key, num(now_ms + max_ttl_ms) .. '|' .. num(now_ms))
    return max_ttl_ms, now_ms
  end
  local q, lost = string.match(v, '^(%d+)|?(%d*)$')
  q, lost = tonumber(q) or 0, tonumber(lost) or 0
  if now_ms < q then
    return q - now_ms, lost
  end
  return 0, lost
end

-- Everything about one entity of a task is one field of the task's hash:
--   "last_tick|fence|token|exp|fu|touched|reason|tick|holder#last"
-- last_tick: the latest tick that started a run; fence: the latest fence
-- granted; token: the holder's ('' when free); exp: when the lease expires
-- (Redis ms; held means token ~= '' and exp > now); fu: '1' when a follow-up
-- was requested while held; touched: the last grant or release (the sweep's
-- clock); reason, tick, holder: the current grant's (holder escaped; tick
-- is the run's: the tick it runs for, or the one its due entry carries);
-- last: the last run, "outcome|start|end|fence|reason|replica", or ''.
-- head returns the fields every script reads, as strings.
local function head(v)
  if v then
    local lt, f, tok, exp, fu = string.match(v, '^(%d*)|(%d*)|([^|]*)|(%d*)|(%d?)|')
    if lt then return lt, f, tok, exp, fu end
  end
  return '0', '0', '', '0', '0'
end

-- tail returns the last-run part of a value, '#' included.
local function tail(v)
  local p = v and string.find(v, '#', 1, true)
  if p then return string.sub(v, p) end
  return '#'
end

-- grant returns since, reason and holder of the current grant.
local function grant(v)
  return string.match(v, '^[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)|([^|]*)|[^|]*|([^#]*)#')
end

-- run_tick returns the tick of the current grant's run.
local function run_tick(v)
  return string.match(v, '^[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(%d*)|') or '0'
end

local function is_held(tok, exp, now_ms)
  return tok ~= '' and tonumber(exp) > now_ms
end

-- reply joins a batch's answers, one per entity, with spaces (none holds
-- one: holders are escaped): one bulk string is cheaper to send and to read
-- than an array of hundreds.
local function reply(out)
  return table.concat(out, ' ')
end

-- fields collects every stride-th ARGV from first on: the hash fields of a
-- batch, for one HMGET.
local function fields(first, stride)
  local fs = {}
  for i = first, #ARGV, stride do fs[#fs + 1] = ARGV[i] end
  return fs
end

-- A due entry's info is "reason|attempt|tick_ms|claim".
local function due_claim(info_key, member)
  local v = redis.call('HGET', info_key, member)
  if not v then return nil end
  local r, a, t, c = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  return c
end

-- ack removes a due entry if it is still the one this claim took.
local function ack(due_key, info_key, member, claim)
  if member == '' or claim == '' then return 0 end
  if due_claim(info_key, member) == claim then
    redis.call('ZREM', due_key, member)
    redis.call('HDEL', info_key, member)
    return 1
  end
  return 0
end

-- add_due stores one pending request per (task, entity). An earlier unclaimed
-- request already covers a later one; a claimed (in-flight) one is replaced, so
-- the request made now is carried out after the in-flight run.
local function add_due(due_key, info_key, member, reason, due_ms, attempt, tick_ms)
  local cur = redis.call('ZSCORE', due_key, member)
  if cur and tonumber(cur) <= due_ms and due_claim(info_key, member) == '' then
    return 0
  end
  redis.call('ZADD', due_key, num(due_ms), member)
  redis.call('HSET', info_key, member, reason .. '|' .. attempt .. '|' .. tick_ms .. '|')
  return 1
end
