-- Shared helpers, prepended to every tickd script after the constants Go
-- hands over (format.go's luaConstants: EARLY_MS, REASON_*, GRANT_*, …).
-- Times are the Redis server's clock (TIME) in ms, so replicas with skewed
-- clocks agree.
--
-- Every stored or passed format has one decode and one encode here, with the
-- field names of its Go twin in format.go; TestCodecsAgree holds the two
-- together. Fields stay strings: scripts convert what they compare.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function num(x)
  return string.format('%.0f', x)
end

local match, sub = string.match, string.sub

-- Entity value (Go: entityValue), one field of a task's hash:
--   last_tick|fence|token|exp|fu|touched|reason|tick|holder#last
-- fu, the follow-up flag, is a digit: 0 none, 1 queued, FU_REPLACE (a
-- replace's: acquire.lua), so that an older tickd still reads the value.
-- decode_entity fills e (a new table when nil) with v's fields and returns
-- it, or returns nil when v is not in this format. A batch's scripts pass
-- one scratch table for every entity: this is the fan-out's hot path. last,
-- the run record, is long and only ever kept or replaced, so decode leaves
-- it in v (e.src from e.last_at) and e.last is nil until a script sets it;
-- last_of(e) reads it.
local ENTITY = '^(%d*)|(%d*)|([^|]*)|(%d*)|(%d?)|(%d*)|([^|]*)|(%d*)|([^#]*)#()'

local function decode_entity(v, e)
  e = e or {}
  local at
  e.last_tick, e.fence, e.token, e.exp, e.fu, e.touched, e.reason, e.tick, e.holder, at = match(v, ENTITY)
  if not at then return nil end
  e.src, e.last_at, e.last = v, at, nil
  return e
end

-- new_entity fills e (a new table when nil) as an entity tickd has never seen.
local function new_entity(e)
  e = e or {}
  e.last_tick, e.fence, e.token, e.exp, e.fu, e.touched, e.reason, e.tick, e.holder = '0', '0', '', '0', '0', '0', '', '0', ''
  e.src, e.last_at, e.last = '#', 2, nil
  return e
end

local function last_of(e)
  return e.last or sub(e.src, e.last_at)
end

local function encode_entity(e)
  return e.last_tick .. '|' .. e.fence .. '|' .. e.token .. '|' .. e.exp .. '|' .. e.fu .. '|' ..
    e.touched .. '|' .. e.reason .. '|' .. e.tick .. '|' .. e.holder .. '#' .. (e.last or sub(e.src, e.last_at))
end

-- entity reads a value of the hash into e (or a new table), or a new
-- entity for none (or for a value in a format this code does not know,
-- which it then replaces).
local function entity(v, e)
  return (v and decode_entity(v, e)) or new_entity(e)
end

local function is_held(e, now_ms)
  return e.token ~= '' and tonumber(e.exp) > now_ms
end

-- free ends the current grant, keeping what outlives it (last tick, fence,
-- follow-up flag); touched is now.
local function free(e, now_ms_s)
  e.token, e.exp, e.touched, e.reason, e.tick, e.holder = '', '0', now_ms_s, '', '0', ''
end

-- The one grant and the one release of an entity's lease, which
-- acquire.lua and release.lua call on their slow paths and
-- TestFastPathsAgree holds grant_fast and release_fast to.

-- ran_before answers whether a tick run for tick (a number, 0 for none)
-- finds a tick at or after it already started on e.
local function ran_before(e, tick)
  return tick > 0 and tonumber(e.last_tick) >= tick
end

-- grant gives e a new lease: token until exp_s, held by holder for a run of
-- reason carrying run_tick; a tick run (tick > 0) records its tick. The
-- fence is max(last fence + 1, the server clock in µs): fences outlive
-- every key, so they keep increasing after a sweep or after Redis lost its
-- data. Returns the fence.
local function grant(e, now, now_s, now_ms_s, tick, tick_s, token, exp_s, reason, run_tick, holder)
  local fence = now_s
  if e.fence ~= '0' and tonumber(e.fence) >= now then fence = num(tonumber(e.fence) + 1) end
  if tick > 0 and tick > tonumber(e.last_tick) then e.last_tick = tick_s end
  e.fence, e.token, e.exp, e.touched = fence, token, exp_s, now_ms_s
  e.reason, e.tick, e.holder = reason, run_tick, holder
  return fence
end

-- release frees e's lease after its run, whose record is last, and clears
-- the follow-up flag (the caller has read it).
local function release(e, now_ms_s, last)
  free(e, now_ms_s)
  e.fu, e.last = '0', last
end

-- The fan-out's hot path (docs/performance.md) reads and rewrites entity values
-- by the positions of their separators instead: making a string is most of
-- what a script costs in Redis (each one is hashed, interned and collected),
-- and decode_entity plus encode_entity make eleven. grant_fast and
-- release_fast make two to four, for the common cases only; they answer nil
-- for the others, which go through decode_entity. A call into C (find, sub,
-- tonumber, byte) costs about 0.1 µs, so they look only for the separators
-- they read, and copy the fields they keep without checking them: a value
-- with those separators is one tickd wrote. TestFastPathsAgree holds them to
-- the codec.
--
-- They compare decimal numbers as tickd writes them (no sign, no leading
-- zero) without converting them (tonumber is strtod): a longer one is
-- larger, and digits of one length compare in their order in every
-- locale. The comparisons are written out where they are made, not in a
-- function: a Lua call costs more than the comparison (docs/performance.md).
local find, byte = string.find, string.byte

-- grant_fast_for returns grant_fast for one batch of acquires: tick (a
-- number, 0 for none) and the strings the grants write are the batch's, so
-- that each grant passes only what is its own, and the pieces every new
-- value shares are joined once.
--
-- grant_fast answers an acquire of v, a stored value, when its lease is
-- free (no token, expiry 0): 'ran' and the last tick when a tick at or
-- after floor_s (the tick's, but for an entity whose zone changed) ran,
-- else the new value and its fence. nil when v has a token (held, or
-- expired but not released) or is not understood. tokbar is the new token
-- between its separators ('|' .. token .. '|'), in two pieces (tokbar ..
-- tokbar2: a chunk's prefix and position, or the whole and '') so that the
-- grant concatenates them once. Its fields are as acquire.lua's grant sets
-- them.
--
-- v > floor_s says whether the last tick, v's first field, is at or after
-- the floor when both have one length: the digits decide where they
-- differ, and v, with more after them, sorts after a floor_s it starts
-- with.
local function grant_fast_for(tick, tick_s, floor_s, now_s, now_ms_s, exp_s, reason, holder)
  local lf0, ln = #floor_s, #now_s
  -- The new value's middle, after the token: expiry, follow-up flag (kept:
  -- '0', or '1', or '' in values of tickd before it), touched, reason.
  local after_fu = '|' .. now_ms_s .. '|' .. reason .. '|'
  local mid0, tail = exp_s .. '|0' .. after_fu, '|' .. holder
  return function(v, tokbar, tokbar2, run_tick)
    local p1 = find(v, '|', 1, true)
    local p2 = p1 and find(v, '|', p1 + 1, true)
    if not p2 then return nil end
    -- No token, expiry 0, then the follow-up flag fu.
    local a, b, c, fu = byte(v, p2 + 1, p2 + 4)
    if a ~= 124 or b ~= 48 or c ~= 124 then return nil end
    local p9 = find(v, '#', p2 + 4, true)
    if not p9 then return nil end
    local lt_s = tick_s
    if tick == 0 then
      lt_s = sub(v, 1, p1 - 1)
    elseif p1 - 1 > lf0 or (p1 - 1 == lf0 and v > floor_s) then
      return 'ran', sub(v, 1, p1 - 1)
    end
    local f_s, fence, lf = sub(v, p1 + 1, p2 - 1), now_s, p2 - p1 - 1
    if lf > ln or (lf == ln and f_s >= now_s) then
      local f = tonumber(f_s)
      if not f then return nil end
      fence = num(f + 1)
    end
    local m = mid0
    if fu == 124 then
      m = exp_s .. '|' .. after_fu
    elseif fu == 49 then
      m = exp_s .. '|1' .. after_fu
    elseif fu ~= 48 then
      return nil -- a replace's follow-up (FU_REPLACE): decide's
    end
    return lt_s .. '|' .. fence .. tokbar .. tokbar2 .. m .. run_tick .. tail .. sub(v, p9), fence
  end
end

-- release_fast_for returns release_fast for one batch of releases at
-- now_ms_s, the pieces every new value shares joined once.
--
-- release_fast answers the value after the release of v's lease by the
-- token in tokbar ('|' .. token .. '|') with run record last, when that
-- token holds it and no follow-up was asked for; else nil. Its fields are
-- as release.lua's free sets them.
local function release_fast_for(now_ms_s)
  local ln, freed = #now_ms_s, '|0|0|' .. now_ms_s .. '||0|#'
  return function(v, tokbar, last)
    local p2 = find(v, tokbar, 1, true)
    local p1 = p2 and find(v, '|', 1, true)
    if not p2 or find(v, '|', p1 + 1, true) ~= p2 then return nil end
    local p3 = p2 + #tokbar - 1
    local p4 = find(v, '|', p3 + 1, true)
    local fu = p4 and byte(v, p4 + 1)
    if not p4 or fu == 49 or fu == 50 then return nil end -- '1', FU_REPLACE
    local le = p4 - p3 - 1
    if ln > le or (ln == le and now_ms_s >= sub(v, p3 + 1, p4 - 1)) then return nil end
    return sub(v, 1, p2) .. freed .. last
  end
end

-- unbar is the token in tokbar, a lease token between its separators as
-- Go sends it ('|' .. token .. '|').
local function unbar(tokbar)
  return sub(tokbar, 2, -2)
end

-- Run record (Go: runRecord), an entity's last run after the '#':
--   outcome|start|end|fence|reason|replica[|error]
-- Go writes it at release; unlock writes one here. A run without an error
-- leaves out its field and separator.
local function encode_run(r)
  local v = r.outcome .. '|' .. r.start .. '|' .. r['end'] .. '|' .. r.fence .. '|' .. r.reason .. '|' .. r.replica
  if r.error and r.error ~= '' then v = v .. '|' .. r.error end
  return v
end

local function decode_run(v)
  local o, s, e, f, r, rep, err = match(v, '^([^|]*)|(%d*)|(%d*)|(%d*)|([^|]*)|([^|]*)|?([^|]*)$')
  if not o then return nil end
  return {outcome = o, start = s, ['end'] = e, fence = f, reason = r, replica = rep, error = err}
end

-- Due info (Go: dueInfo), a pending request's details in the due-info hash:
--   reason|attempt|tick|reqs|claim
-- reqs: the ids of the requests (tickd trigger -wait) the run answers,
-- comma-joined.
local function decode_due(v)
  local r, a, t, q, c = match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if not r then return nil end
  return {reason = r, attempt = a, tick = t, reqs = q, claim = c}
end

local function encode_due(d)
  return d.reason .. '|' .. d.attempt .. '|' .. d.tick .. '|' .. d.reqs .. '|' .. d.claim
end

-- Due entry a run carries out (Go: dueFrom), an acquire argument:
--   claim|tick|reqs
local function decode_from(v)
  local c, t, q = match(v, '^([^|]*)|(%d+)|([^|]*)$')
  if not c then return nil end
  return {claim = c, tick = t, reqs = q}
end

-- Next run asked for at release (Go: nextRun), a release argument:
--   reason|delay_ms|attempt|carry
-- carry is '1' when the run did not do its work (handed over): the next run
-- answers its requests.
local function decode_next(v)
  local r, d, a, c = match(v, '^([^|]*)|(%d+)|(%d+)|([01])$')
  if not r then return nil end
  return {reason = r, delay_ms = d, attempt = a, carry = c}
end

-- join_reqs adds request ids b to a (both comma-joined), keeping the newest
-- MAX_REQS: an entry triggered again and again answers its latest waiters.
local function join_reqs(a, b)
  if b == '' then return a end
  if a == '' then return b end
  local all, n = {}, 0
  for id in string.gmatch(a .. ',' .. b, '[^,]+') do
    n = n + 1
    all[n] = id
  end
  if n <= MAX_REQS then return a .. ',' .. b end
  return table.concat(all, ',', n - MAX_REQS + 1, n)
end

-- Follow-up (no Go twin: only the scripts read it), an entity's field in
-- the task's followups hash while a queued run is asked for:
--   tick|reqs
-- tick: the latest tick (ms) of the requests that queued it, which the
-- queued run carries; reqs: the ids of the requests it answers. A value
-- without '|' (tickd before the tick was kept) is reqs alone.
local function decode_followup(v)
  if not v then return {tick = '0', reqs = '', buf = ''} end
  local t, q, buf = match(v, '^(%d+)|([^|]*)|?([%d,]*)$')
  if not t then return {tick = '0', reqs = v, buf = ''} end
  return {tick = t, reqs = q, buf = buf}
end

local function encode_followup(f)
  if f.buf ~= '' then return f.tick .. '|' .. f.reqs .. '|' .. f.buf end
  return f.tick .. '|' .. f.reqs
end

-- buffer_tick adds tick_s (a decimal string) to follow-up f's buffer of
-- ticks (queue_max): f.tick, the next to run, then f.buf, comma-joined,
-- oldest first. A tick more than age ms before tick_s (age > 0) is missed,
-- then the oldest past qmax dropped. Returns the ticks missed and dropped,
-- comma-joined.
local function buffer_tick(f, tick_s, qmax, age)
  local l, tick = {}, tonumber(tick_s)
  if f.tick ~= '0' then l[1] = f.tick end
  for t in string.gmatch(f.buf, '%d+') do l[#l + 1] = t end
  local at = #l + 1
  for i = #l, 1, -1 do
    local t = tonumber(l[i])
    if t == tick then at = nil break end
    if t < tick then break end
    at = i
  end
  if at then table.insert(l, at, tick_s) end
  local missed, dropped = {}, {}
  while age > 0 and #l > 0 and tonumber(l[1]) < tick - age do missed[#missed + 1] = table.remove(l, 1) end
  while #l > qmax do dropped[#dropped + 1] = table.remove(l, 1) end
  f.tick = l[1] or '0'
  f.buf = table.concat(l, ',', 2)
  return table.concat(missed, ','), table.concat(dropped, ',')
end

-- buffer_next makes f, a follow-up just enqueued, the next buffered tick's
-- (without requests: they went with the first), and says whether there
-- was one.
local function buffer_next(f)
  if f.buf == '' then return false end
  local first, rest = match(f.buf, '^(%d+),?(.*)$')
  f.tick, f.reqs, f.buf = first, '', rest
  return true
end

-- answer records outcome for entity field in each request of reqs: the
-- request's hash (Go: keys.request) is found among KEYS from first on by
-- its id, and lives for REQUEST_TTL_MS after its last answer.
local function answer(first, reqs, field, outcome)
  if reqs == '' then return end
  for id in string.gmatch(reqs, '[^,]+') do
    for k = first, #KEYS do
      if sub(KEYS[k], -#id - 9) == ':request:' .. id then
        redis.call('HSET', KEYS[k], field, outcome)
        redis.call('PEXPIRE', KEYS[k], REQUEST_TTL_MS)
        break
      end
    end
  end
end

-- Epoch (Go: epochValue): quarantine_until|lost_at|run|successors, run
-- the run_id of the Redis server that last checked it, successors the
-- run_ids of its replicas (comma-joined) as a store last found them (none in
-- an epoch InitEpoch wrote, or a tickd before them: quarantine_until|lost_at).
local function decode_epoch(v)
  local q, lost, run, succ = match(v, '^(%d+)|(%d+)|(%x+)|([%x,]*)$')
  if not q then
    q, lost = match(v, '^(%d+)|(%d+)$')
    if not q then return nil end
    run, succ = '', ''
  end
  return {quarantine_until = q, lost_at = lost, run = run, successors = succ}
end

local function encode_epoch(e)
  if e.run == '' then return e.quarantine_until .. '|' .. e.lost_at end
  return e.quarantine_until .. '|' .. e.lost_at .. '|' .. e.run .. '|' .. e.successors
end

-- server_run is the run_id of the server the script runs on (40 hex
-- digits; found by a plain search rather than a pattern tried at each
-- byte before it).
local function server_run()
  local info = redis.call('INFO', 'server')
  local at = string.find(info, 'run_id:', 1, true)
  if not at then return '' end
  return match(sub(info, at + 7, at + 46), '^%x+') or ''
end

-- Announcement (Go: announceValue), a replica's field of the replicas hash:
--   until_ms|tasks|process|host|version|since_ms|seen_ms
-- tasks, host and version escaped (tasks space-joined); process is the
-- announcing process's nonce, which tells two processes with one replica id
-- apart. A value of tickd before the process fields is until_ms|tasks.
local function decode_announce(v)
  local u, t, p, h, ver, since, seen = match(v, '^(%d+)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(%d+)|(%d+)$')
  if u then
    return {until_ms = u, tasks = t, process = p, host = h, version = ver, since_ms = since, seen_ms = seen}
  end
  u, t = match(v, '^(%d+)|([^|]*)$')
  if not u then return nil end
  return {until_ms = u, tasks = t, process = '', host = '', version = '', since_ms = '0', seen_ms = '0'}
end

local function encode_announce(a)
  return a.until_ms .. '|' .. a.tasks .. '|' .. a.process .. '|' .. a.host .. '|' .. a.version .. '|' ..
    a.since_ms .. '|' .. a.seen_ms
end

-- Acquire's answers, one per entity (Go: decodeAcquireReply): a granted
-- fence alone, or status|fields.
local function reply_busy(e) return GRANT_BUSY .. '|' .. e.touched .. '|' .. e.fence .. '|' .. e.holder end
-- reply_busy_also is reply_busy with what the acquire did beside: the
-- holder replaced (a flag), ticks dropped and missed from the buffer.
local function reply_busy_also(e, replaced, dropped, missed)
  local flag = ''
  if replaced then flag = REVOCATION_REPLACED end
  return reply_busy(e) .. '|' .. flag .. '|' .. dropped .. '|' .. missed
end
local function reply_ran(last_tick) return GRANT_RAN .. '|' .. last_tick end
-- A rollback this call found is marked, so that the caller quarantines the
-- server's other buckets too (lib.lua's quarantine).
local function reply_quarantine(ms_left, found)
  if found then return GRANT_QUARANTINE .. '|' .. ms_left .. '|' .. LOSS_FOUND end
  return GRANT_QUARANTINE .. '|' .. ms_left
end
local function reply_early(ms_left) return GRANT_EARLY .. '|' .. ms_left end

-- bucket_top is the highest fence the bucket granted (acquire.lua's), of
-- its dueinfo hash info_key; 0: none recorded.
local function bucket_top(info_key) return tonumber(redis.call('HGET', info_key, 'top')) or 0 end

-- The epoch key exists from the first acquire on. When it is missing, Redis
-- lost its data (or is new): nothing is granted for one maximum lease TTL,
-- so no old holder can still trust a lease that Redis has forgotten; and no
-- tick before the loss is run again, since the records of the ticks that did
-- run are gone too. A server that restarted lost its data as far as tickd
-- can tell: it may have loaded a snapshot older than the leases and the
-- records written since, the epoch among them. Each epoch keeps the run_id
-- of the server that last checked it, and of that server's replicas
-- (successors.lua): another server is a loss too, unless it is one of
-- those replicas, promoted in its place (Sentinel, a Cluster failover),
-- which had every grant the replicas acknowledged (replica_acks). Neither
-- tells a replica that copied a restarted server's older data before it was
-- promoted: the data is a snapshot's, its epoch too. What tells it is the
-- calling tickd's memory: seen (µs; 0: none) is the highest fence it was
-- granted in the bucket and trusted (acknowledged), and top, the field
-- 'top' of the bucket's dueinfo hash (no member is without a ':'; the
-- caller reads it: lib.lua's bucket_top), is the highest this data granted
-- (acquire.lua writes it). A fence seen above it,
-- and after the last loss the epoch knows of (every fence after a loss is
-- above its time), was granted by data that is gone: a loss. So is one
-- lost_said says, unless a quarantine is under way. Returns the quarantine
-- left (ms), the loss time (ms), whether this call found the loss, and
-- whether by a fence seen (a rollback, which only the buckets holding a
-- fence it forgot find: the caller quarantines the server's others).
local function quarantine(epoch_key, now_ms, max_ttl_ms, seen, lost_said, top)
  local v = redis.call('GET', epoch_key)
  local ep = v and decode_epoch(v)
  local run = server_run()
  -- A loss said by the caller is one found elsewhere on the server: one
  -- under way here already stands for it.
  local lost, changed = not ep or (lost_said and now_ms >= tonumber(ep.quarantine_until)), false
  if not ep then
    ep = {run = ''}
  end
  if ep.run ~= run then
    if ep.run ~= '' and not string.find(',' .. ep.successors .. ',', ',' .. run .. ',', 1, true) then
      lost = true -- restarted, or another server: not a replica it had
    end
    ep.run, ep.successors, changed = run, '', true
  end
  local rolled = false
  if not lost and seen and seen > 0 and seen > tonumber(ep.lost_at) * 1000 and seen > top then
    lost, rolled = true, true -- rolled back past a grant this caller trusted
  end
  if lost then
    ep.quarantine_until, ep.lost_at = num(now_ms + max_ttl_ms), num(now_ms)
  end
  if changed or lost then redis.call('SET', epoch_key, encode_epoch(ep)) end
  if lost then return max_ttl_ms, now_ms, true, rolled end
  local q = tonumber(ep.quarantine_until)
  if now_ms < q then
    return q - now_ms, tonumber(ep.lost_at), false
  end
  return 0, tonumber(ep.lost_at), false
end

-- reply joins a batch's answers, one per entity, with spaces (none holds
-- one: holders are escaped): one bulk string is cheaper to send and to read
-- than an array of hundreds. An answer followed by '*' and a count stands
-- for that many equal answers (Go: splitReply).
local function reply(out)
  return table.concat(out, ' ')
end

-- fields collects every stride-th ARGV from first on: the hash fields of a
-- batch, for one HMGET (each after mark, when given).
local function fields(first, stride, mark)
  local fs, n = {}, 0
  for i = first, #ARGV, stride do
    n = n + 1
    fs[n] = ARGV[i]
  end
  if mark then
    for k = 1, n do fs[k] = mark .. fs[k] end
  end
  return fs
end

-- due_claim returns the claim of member's due entry: nil for no entry, ''
-- for one not taken.
local function due_claim(info_key, member)
  local v = redis.call('HGET', info_key, member)
  local d = v and decode_due(v)
  return d and d.claim
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
-- request already covers a later one, and takes on its request ids; a claimed
-- (in-flight) one is replaced, so the request made now is carried out after
-- the in-flight run (whose taker answers the ids it took). A newer tick's
-- run waiting for a limit supersedes an older tick's waiting one: the entity
-- has one waiting run, for its newest tick, due when the older was. Returns
-- 1 when stored, 0 when covered, 2 when covered by the same tick's waiting
-- run, or the older tick (ms, a string) when one
-- was superseded (the run added, when it is the older, or when it is a
-- tick's run that yields to another run asked for: a retry).
local function add_due_entry(due_key, info_key, member, reason, due_ms, attempt, tick, reqs)
  local cur = redis.call('ZSCORE', due_key, member)
  local d = cur and decode_due(redis.call('HGET', info_key, member) or '')
  if d and d.claim == '' and reason == REASON_TICK and d.reason == REASON_TICK and tonumber(tick) > tonumber(d.tick) then
    local older = d.tick
    d.tick, d.reqs = tick, join_reqs(d.reqs, reqs)
    redis.call('HSET', info_key, member, encode_due(d))
    if tonumber(cur) > due_ms then redis.call('ZADD', due_key, num(due_ms), member) end
    return older
  end
  if d and d.claim == '' and reason == REASON_TICK and d.reason == REASON_TICK and tonumber(tick) == tonumber(d.tick) then
    -- The same tick's run of the entity waits already (another replica's
    -- fan-out met the limit too): covered, and said so (2), so that each
    -- replica's part of the tick counts the entity waiting once in all.
    local reqs2 = join_reqs(d.reqs, reqs)
    if reqs2 ~= d.reqs then
      d.reqs = reqs2
      redis.call('HSET', info_key, member, encode_due(d))
    end
    return 2
  end
  if d and d.claim == '' and reason == REASON_TICK and d.reason == REASON_TICK and tonumber(tick) < tonumber(d.tick) then
    -- An older tick's run joining the newer's waiting one: superseded.
    local reqs2 = join_reqs(d.reqs, reqs)
    if reqs2 ~= d.reqs then
      d.reqs = reqs2
      redis.call('HSET', info_key, member, encode_due(d))
    end
    return tick
  end
  if d and d.claim == '' then
    reqs = join_reqs(d.reqs, reqs)
    -- A tick's run waiting for a limit never takes the place of another
    -- run asked for (a retry after a back-off), which always takes its: the
    -- tick's run would be refused as already ran, and the other lost.
    local weaker = reason == REASON_TICK and d.reason ~= REASON_TICK
    local stronger = reason ~= REASON_TICK and d.reason == REASON_TICK
    if weaker or (not stronger and tonumber(cur) <= due_ms) then
      if reqs ~= d.reqs then
        d.reqs = reqs
        redis.call('HSET', info_key, member, encode_due(d))
      end
      -- A tick's run that yields to another run of the entity is
      -- superseded by it: its tick's record must say so (it never runs).
      if weaker then return tick end
      return 0
    end
  end
  redis.call('ZADD', due_key, num(due_ms), member)
  redis.call('HSET', info_key, member, encode_due({reason = reason, attempt = attempt, tick = tick, reqs = reqs, claim = ''}))
  if d and d.claim == '' and d.reason == REASON_TICK and reason ~= REASON_TICK then
    return d.tick -- a tick's waiting run, whose place another run asked for took
  end
  return 1
end

-- add_due is add_due_entry, and wakes the replicas' due polls when the
-- entry is now the earliest of its set: a poll that found nothing due
-- waits until the earliest entry it saw is due (Go's dueIdle). It
-- publishes "BUCKET DELAY_MS" on the prefix's duewake channel (keys.go's
-- dueWake; the due key is PREFIX:{BUCKET}:due).
local function add_due(due_key, info_key, member, reason, due_ms, attempt, tick, reqs)
  local before = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')[2]
  local r = add_due_entry(due_key, info_key, member, reason, due_ms, attempt, tick, reqs)
  local first = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')[2]
  if first and (not before or tonumber(first) < tonumber(before)) then
    local prefix, bk = match(due_key, '^(.*):{(%d%d)}:due$')
    if prefix then
      local delay = math.max(0, tonumber(first) - math.floor(now_us() / 1000))
      redis.pcall('PUBLISH', prefix .. ':duewake', tonumber(bk) .. ' ' .. num(delay))
    end
  end
  return r
end

-- shards_refused says whether a call must be refused because it named its
-- shard of a task by a count (want, a decimal string; '' for a call not
-- checked) other than the one the shard's layout key (key: TASK:shards in
-- the shard's slot) holds: a replica that read the count before a reshard
-- is refused, reads it again and names the shard anew (Go's
-- driver.ErrShardsChanged). The key holds the count, 'x:N' for a shard a
-- count N leaves unused, 'm:FROM:TO' while tickd migrate moves the task.
-- A value may end in '@G', the generation of the reshard that wrote it
-- (Go's shardlayout.go): compared without it.
-- No key: a task whose count was never recorded is in one shard.
local function shards_refused(key, want)
  if want == '' then return false end
  local got = redis.call('GET', key)
  if got then return string.match(got, '^[^@]*') ~= want end
  return want ~= '1'
end
