-- KEYS: epoch, due, dueinfo, entities (the task's hash), followups (the
--   task's), then the tick's claims (when chunks ~= ''), then the hashes of
--   the requests the batch's due entries answer, then the run record's
--   numbers, count and the tick's bitmap (when record ~= 0; record < 0:
--   a bitmap of the tick's own, then the tick's), then the day's
--   fan marks (when fanned > 0), then the shard's layout key
--   (shards_refused).
-- ARGV (scripts.go's acquireArgs): max_ttl_ms, holder (escaped), member_prefix (escaped task .. ':'),
--   ttl_ms, reason, tick_ms (0: not a tick run), queue (0|1), chunks
--   ('' or an entry of CHUNK_ENTRY bytes per chunk, "tttttmm" .. id ..
--   rid: triple t holds the m entities of chunk id of the tick's entity
--   stream, whose record is rid: a hash of the fields sent, so that a
--   record's positions are always the same entities; id and rid are 32
--   hex digits),
--   shards (shards_refused), twice (1: an entity
--   is asked for twice), seen (µs: the highest fence of the bucket the
--   caller was granted and trusted; lib.lua's quarantine) -- shared by
--   the batch -- then a triple per
--   entity: field, token between its separators ('|' .. token .. '|',
--   lib.lua's unbar), from ('' or the due entry the run carries out,
--   encoded as decode_from reads it); or per chunk: its fields
--   space-joined, its tokens' prefix (entity j's token is prefix .. j ..
--   '|'), ''.
-- A chunk another replica already took for this tick (its id is in the
-- claims set) is answered as run, and its fields are not even split; one not
-- taken yet is taken here, with its leases. So a replica that sends a chunk
-- another took costs Redis little more than the bytes.
-- A due entry found busy hands its request ids to the follow-up (queue) or
-- answers them ANSWER_SKIPPED.
-- Returns one answer per entity (lib.lua's reply_*): the fence when granted,
-- or busy, ran, quarantine or early with their fields; a taken chunk's is
-- one for all of them (lib.lua's reply).
--
-- This is the fan-out's hot path (docs/performance.md): one HMGET reads the whole
-- batch and one HSET writes it. When Go found an entity asked for twice in
-- the batch (TWICE), cur holds what this call already wrote, so that it is
-- granted once.
local ARGV, gmatch = ARGV, string.gmatch
if shards_refused(KEYS[#KEYS], ARGV[A_SHARDS]) then return redis.error_reply(SHARDS_CHANGED) end
local now = now_us()
local now_ms = math.floor(now / 1000)
local now_s, now_ms_s = num(now), num(now_ms)
local max_ttl, holder, mprefix = tonumber(ARGV[A_MAX_TTL]), ARGV[A_HOLDER], ARGV[A_PREFIX]
local top0 = bucket_top(KEYS[3])
local q, lost_at, _, rolled = quarantine(KEYS[1], now_ms, max_ttl, tonumber(ARGV[A_SEEN]), false, top0)
local out = {}
local nt = (#ARGV - A_FIXED) / E_STRIDE
-- cts: the chunks' triples, in the order sent.
local n, cm, cid, crid, cts = nt, {}, {}, {}, {}
local chunks = ARGV[A_CHUNKS]
for o = 1, #chunks - CHUNK_ENTRY + 1, CHUNK_ENTRY do
  local t, m = tonumber(sub(chunks, o, o + 4)), tonumber(sub(chunks, o + 5, o + 6))
  cm[t], cid[t], crid[t], n = m, sub(chunks, o + 7, o + 38), sub(chunks, o + 39, o + 70), n + m - 1
  cts[#cts + 1] = t
end
if q > 0 then
  for i = 1, n do out[i] = reply_quarantine(num(q), rolled) end
  return reply(out)
end
local ttl, reason, tick_s, queue = tonumber(ARGV[A_TTL]), ARGV[A_REASON], ARGV[A_TICK], ARGV[A_QUEUE]
local twice = ARGV[A_TWICE] == '1'
-- qmax: the ticks buffered for a busy entity (queue_max); 1 folds them
-- into one follow-up, 0 queues none (skip, replace).
local qmax = tonumber(queue) or 0
local tick = tonumber(tick_s)
-- floor: a tick run for a tick >= it counts as run (the tick's own but
-- for an entity whose zone changed: Request.Floor).
local floor_s = ARGV[A_FLOOR]
if floor_s == '0' or floor_s == '' or tick == 0 then floor_s = tick_s end
local floor = tonumber(floor_s)
local exp_s = num(now_ms + ttl)
local refused
if tick > now_ms + EARLY_MS then
  -- A replica whose clock runs ahead must not start a tick before the
  -- others could: Redis's clock decides when a tick has come.
  refused = reply_early(num(tick - now_ms))
elseif tick > 0 and tick < lost_at then
  -- The tick may have run before Redis lost its records: never twice.
  refused = reply_ran(num(lost_at))
elseif tick > 0 and (reason == REASON_CATCH_UP or reason == REASON_BACKFILL) then
  -- A reshard numbers the entities it moves anew, in another shard's run
  -- record: which of them ran a tick before it (its generation, the
  -- layout's '@G', Redis ms at its start) is not known. Never twice.
  local gen = tonumber(match(redis.call('GET', KEYS[#KEYS]) or '', '@(%d+)$') or '0')
  if tick < gen then refused = reply_ran(num(gen)) end
end
if refused then
  for i = 1, n do out[i] = refused end
  return reply(out)
end
local record, catch_up = tonumber(ARGV[A_RECORD]), reason == REASON_CATCH_UP or reason == REASON_BACKFILL
-- The chunk path (chunk.lua), with RECORDS: a chunk's record answers a
-- tick's run of the chunk alone when it can (chunk_answer, cans[t]), no
-- field split, no value read; the entities of the other requests are
-- detached from any record first, and a chunk whose every entity is
-- granted plainly here becomes a record (attach, below).
local records = ARGV[A_RECORDS] == '1'
local by_record = records and not twice and record == 0 and not catch_up and reason == REASON_TICK and tick > 0
local crec, cans = {}, {}
if by_record and ARGV[A_CHUNKS] ~= '' then
  local rf, rt = {}, {}
  for t = 1, nt do
    if cm[t] then
      local x = #rf + 1
      rf[x], rt[x] = CHUNK_MARK .. crid[t], t
    end
  end
  local got = redis.call('HMGET', KEYS[4], unpack(rf))
  for x = 1, #rf do
    local c, t = got[x] and decode_chunk(got[x]), rt[x]
    if c then crec[t], cans[t] = c, chunk_answer(c, cm[t], floor, now_ms, queue == BUSY_SKIP) end
  end
end
-- A chunk's j-th token ends with POSITION[j] (chunks.go's maxChunk bounds j).
local POSITION = {'1|', '2|', '3|', '4|', '5|', '6|', '7|', '8|', '9|', '10|', '11|', '12|', '13|', '14|', '15|', '16|',
  '17|', '18|', '19|', '20|', '21|', '22|', '23|', '24|', '25|', '26|', '27|', '28|', '29|', '30|', '31|', '32|'}
-- Step 1, read: take the chunks not yet taken (one SMISMEMBER, one SADD;
-- a chunk sent twice is taken by its first), and list the fields to read,
-- in the order of the requests; a taken chunk has none, and its answer
-- stands for all its entities (taken[t]). One HMGET reads them.
local fs, nf, taken = {}, 0, {}
if #cts > 0 then
  local ids, add, seen = {}, {}, {}
  for x, t in ipairs(cts) do ids[x] = cid[t] end
  local was = redis.call('SMISMEMBER', KEYS[6], unpack(ids))
  for x, t in ipairs(cts) do
    if was[x] == 1 or seen[ids[x]] then
      taken[t] = true
    else
      seen[ids[x]], add[#add + 1] = true, ids[x]
    end
  end
  if #add > 0 then redis.call('SADD', KEYS[6], unpack(add)) end
  redis.call('PEXPIRE', KEYS[6], CLAIMS_TTL_MS)
end
for t = 1, nt do
  local b, m = A_FIXED + E_STRIDE * (t - 1), cm[t]
  if not m then
    nf = nf + 1
    fs[nf] = ARGV[b + E_FIELD]
  elseif not taken[t] and not cans[t] then
    local j = 0
    for f in gmatch(ARGV[b + E_FIELD], '[^ ]+') do
      j, nf = j + 1, nf + 1
      fs[nf] = f
    end
    if j ~= m then
      return redis.error_reply('acquire: chunk ' .. t .. ' has ' .. j .. ' fields, not ' .. m)
    end
  end
end
-- Every entity decided one by one is first out of any record, in a task
-- that ever kept one (the field CHUNK_MARK alone marks it).
if records and nf > 0 and redis.call('HEXISTS', KEYS[4], CHUNK_MARK) == 1 then detach_many(KEYS[4], fs) end
local vals = {}
if nf > 0 then vals = redis.call('HMGET', KEYS[4], unpack(fs)) end
local taken_reply = reply_ran(tick_s)

-- The run record (RECORD > 0; its keys are the three before the layout
-- key): each entity's number in the task's numbers hash, the tick's bitmap.
-- A catch-up or backfill run (REASON_CATCH_UP, REASON_BACKFILL) is decided
-- by it, not by the last tick: an entity whose bit is set ran its tick
-- (done[k]).
-- The optional keys before the layout key: the fan marks, then before
-- them the run record's three (ix, ixn, the bitmap: rec + 0..2).
local rec = #KEYS - 3
if ARGV[A_FANNED] ~= '0' then rec = rec - 1 end
-- A negative RECORD: a record of the tick's own (Request.RecordOf) is the
-- bitmap that decides (rec + 2), and the tick's own (rec + 3) is set too.
if record < 0 then rec = rec - 1 end
local done = {}
if catch_up and record == 0 then return redis.error_reply('acquire: a catch-up run needs the run record') end
if catch_up and nf > 0 then
  local ixs, get, at = redis.call('HMGET', KEYS[rec], unpack(fs)), {}, {}
  for k2 = 1, nf do
    if ixs[k2] then
      get[#get + 1], get[#get + 2], get[#get + 3], at[#at + 1] = 'GET', 'u1', '#' .. ixs[k2], k2
    end
  end
  if #get > 0 then
    local bits = redis.call('BITFIELD', KEYS[rec + 2], unpack(get))
    for j = 1, #at do
      if bits[j] == 1 then done[at[j]] = true end
    end
  end
end

-- record_ran sets the bits of the entities fields (granted) in the tick's
-- bitmap, numbering the ones not numbered yet, and bit 0 (the tick's
-- record is kept), kept for RECORD ms.
local function record_ran(fields)
  local ixk, rk, bf = KEYS[rec], KEYS[rec + 2], {'SET', 'u1', '#0', 1}
  if #fields > 0 then
    local got, missing, new = redis.call('HMGET', ixk, unpack(fields)), 0, {}
    for j = 1, #fields do
      if not got[j] then missing = missing + 1 end
    end
    local n = 0
    if missing > 0 then n = redis.call('INCRBY', KEYS[rec + 1], missing) - missing end
    for j = 1, #fields do
      local ix = got[j]
      if not ix then
        n = n + 1
        ix, new[#new + 1], new[#new + 2] = n, fields[j], n
      end
      bf[#bf + 1], bf[#bf + 2], bf[#bf + 3], bf[#bf + 4] = 'SET', 'u1', '#' .. ix, 1
    end
    if #new > 0 then redis.call('HSET', ixk, unpack(new)) end
  end
  redis.call('BITFIELD', rk, unpack(bf))
  redis.call('PEXPIRE', rk, math.abs(record))
  if record < 0 then
    redis.call('BITFIELD', KEYS[rec + 3], unpack(bf))
    redis.call('PEXPIRE', KEYS[rec + 3], -record)
  end
end

-- decide answers one entity on the slow path, its value decoded into e:
-- already ran; busy (leaving a follow-up with BUSY_QUEUE, revoking the
-- holder too with BUSY_REPLACE, or answering the request skipped); or
-- granted. It returns the answer, whether e changed, and whether the tick
-- already ran.
local function decide(e, field, tok, tsfx, run_tick, reqs)
  if not catch_up and ran_before(e, floor) then return reply_ran(e.last_tick), false, true end
  if not is_held(e, now_ms) then
    if reason == REASON_REPLACED and e.fu == FU_REPLACE then
      -- The replacing run, come at the holder's expiry (it never
      -- released): it is the follow-up, not one more run after it; but
      -- for the triggers that asked meanwhile, which run after it, as
      -- they would have after the holder.
      local f = decode_followup(redis.call('HGET', KEYS[5], field))
      if f.reqs ~= '' then
        e.fu, f.tick, f.buf = '1', '0', ''
        redis.call('HSET', KEYS[5], field, encode_followup(f))
      else
        e.fu = '0'
        redis.call('HDEL', KEYS[5], field)
      end
    end
    return grant(e, now, now_s, now_ms_s, tick, tick_s, unbar(tok .. tsfx), exp_s, reason, run_tick, holder), true, false
  end
  local changed, replaced, dropped, missed = false, false, '', ''
  if queue ~= BUSY_SKIP then
    -- One queued run after the holder, carrying the latest tick of the
    -- requests folded into it (with a buffer, qmax > 1: each tick its
    -- own, oldest first); that tick counts as run, so a late replica's
    -- request for it is not queued once more.
    if e.fu == '0' then e.fu, changed = '1', true end
    if tick > 0 and tick > tonumber(e.last_tick) then e.last_tick, changed = tick_s, true end
    local f = decode_followup(redis.call('HGET', KEYS[5], field))
    if qmax > 1 and tick > 0 then
      missed, dropped = buffer_tick(f, tick_s, qmax, tonumber(ARGV[A_QUEUE_AGE]))
    elseif qmax <= 1 and tonumber(run_tick) > tonumber(f.tick) then
      f.tick = run_tick
    end
    f.reqs = join_reqs(f.reqs, reqs)
    redis.call('HSET', KEYS[5], field, encode_followup(f))
  elseif reqs ~= '' then
    answer(6, reqs, field, ANSWER_SKIPPED)
  end
  if queue == BUSY_REPLACE then
    -- Replace: the holder is revoked (renewals refused: RENEWED_REPLACED,
    -- and told at once), and the follow-up runs with REASON_REPLACED at
    -- its release, or at its lease's end when it never releases (frozen,
    -- cut off): that due entry stands in for the release.
    if sub(e.token, 1, #REVOKED) ~= REVOKED then
      e.token, replaced = REPLACED .. e.token, true
      redis.pcall('PUBLISH', ARGV[A_CHANNEL], sub(mprefix, 1, -2) .. ' ' .. field .. ' ' .. e.fence .. ' ' .. REVOCATION_REPLACED)
    end
    e.fu, changed = FU_REPLACE, true
    add_due(KEYS[2], KEYS[3], mprefix .. field, REASON_REPLACED, tonumber(e.exp), '0', run_tick, '')
  end
  if replaced or dropped ~= '' or missed ~= '' then return reply_busy_also(e, replaced, dropped, missed), changed, false end
  return reply_busy(e), changed, false
end
-- Step 2, decide per entity: grant_fast for the common cases, decide for
-- the rest; each new value is staged. Step 3, write: one HSET.
local cur, writes, nw, e, k, i, top = {}, {}, 0, {}, 0, 0, 0
local ran_fields, ran_seen = {}, {} -- granted, for the run record
local grant_fast = grant_fast_for(tick, tick_s, floor_s, now_s, now_ms_s, exp_s, reason, holder)
for t = 1, nt do
  -- Request t is one entity (its token whole, its due entry), or a chunk
  -- of m (their tokens a prefix and a position, no due entries).
  local b, m = A_FIXED + E_STRIDE * (t - 1), cm[t]
  local tok, from_s, count = ARGV[b + E_TOKEN], '', 1
  if m then count = m else from_s = ARGV[b + E_FROM] end
  if taken[t] then
    i, count = i + 1, 0
    out[i] = taken_reply .. '*' .. cm[t]
  elseif cans[t] then
    -- Answered by its record: one answer for all its entities.
    local c, a = crec[t], cans[t]
    i, count = i + 1, 0
    if a == 'ran' then
      out[i] = reply_ran(num(c.tick))
    elseif a == 'busy' then
      out[i] = reply_busy({touched = num(c.since), fence = num(c.fence), holder = c.holder})
    else
      local fence = chunk_grant(c, now, now_ms, tick, holder, unbar(tok .. '|'), now_ms + ttl, m)
      out[i] = fence == now and now_s or num(fence)
      writes[nw + 1], writes[nw + 2], nw = CHUNK_MARK .. crid[t], encode_chunk(c), nw + 2
      if fence > top then top = fence end
    end
    out[i] = out[i] .. '*' .. cm[t]
  end
  local w0, plain = nw, by_record and m and count > 0
  for j = 1, count do
    k, i = k + 1, i + 1
    local field, tsfx = fs[k], ''
    if m then tsfx = POSITION[j] end
    local claim, run_tick, reqs = '', tick_s, ''
    if from_s ~= '' then
      local from = decode_from(from_s)
      claim, reqs = from.claim, from.reqs
      if tick == 0 then run_tick = from.tick end
    end
    -- The common cases need no decoding (lib.lua's grant_fast): a free
    -- entity granted, or one whose tick already ran.
    local v, fast, fence = vals[k], nil, nil
    if twice then v = cur[field] or v end
    if v and not catch_up then
      fast, fence = grant_fast(v, tok, tsfx, run_tick)
    end
    local ran, w = fast == 'ran' or done[k], nil -- w: the value to write, if any
    if done[k] then
      out[i] = reply_ran(tick_s)
    elseif ran then
      out[i] = reply_ran(fence) -- with 'ran', grant_fast answers the last tick
    elseif fast then
      w, out[i] = fast, fence
    else
      entity(v, e)
      out[i], w, ran = decide(e, field, tok, tsfx, run_tick, reqs)
      if w then w = encode_entity(e) end
    end
    -- Granted (a fence), or busy with the tick left to run after the
    -- holder (queued, or replacing it): the tick counts as run.
    if record ~= 0 and not ran and not ran_seen[field] and (sub(out[i], 1, #GRANT_BUSY) ~= GRANT_BUSY or queue ~= BUSY_SKIP and reason == REASON_TICK) then
      ran_fields[#ran_fields + 1], ran_seen[field] = field, true
    end
    if w then -- staged: written by one HSET at the end, read by a later request for field
      writes[nw + 1], writes[nw + 2], nw = field, w, nw + 2
      if twice then cur[field] = w end
      -- A grant's answer is its fence: now, but after a fence at or past
      -- now (lib.lua's grant), which is rare.
      if out[i] == now_s then
        if now > top then top = now end
      else
        local f = tonumber(out[i])
        if f and f > top then top = f end
      end
    end
    -- A due entry is done with once granted, or once it became a follow-up.
    if claim ~= '' and not ran then ack(KEYS[2], KEYS[3], mprefix .. field, claim) end
    plain = plain and out[i] == now_s and w and match(w, '^[^|]*|[^|]*|[^|]*|[^|]*|0|') ~= nil
  end
  if plain then
    -- Every entity of the chunk granted now, nothing left behind: its
    -- state moves into a record of its own, its values gone.
    for x = w0 + 1, nw do writes[x] = nil end
    nw = w0
    local c, gone = {}, {}
    chunk_grant(c, now, now_ms, tick, holder, unbar(tok .. '|'), now_ms + ttl, m)
    writes[nw + 1], writes[nw + 2], writes[nw + 3], writes[nw + 4], nw = CHUNK_MARK .. crid[t], encode_chunk(c), CHUNK_MARK, '1', nw + 4
    for j = 1, m do
      local f = fs[k - m + j]
      writes[nw + 1], writes[nw + 2], nw, gone[j] = INDEX_MARK .. f, crid[t] .. ':' .. j, nw + 2, f
    end
    redis.call('HDEL', KEYS[4], unpack(gone))
  end
end
if nw > 0 then redis.call('HSET', KEYS[4], unpack(writes)) end
-- The highest fence this data granted (lib.lua's quarantine).
if top > top0 then redis.call('HSET', KEYS[3], 'top', num(top)) end
if record ~= 0 then record_ran(ran_fields) end
if ARGV[A_FANNED] ~= '0' then
  -- A tick fanned out: its second of the day in the day's marks, kept
  -- FANNED ms, so that a backfill tells it from a tick no one ran.
  redis.call('SETBIT', KEYS[#KEYS - 1], math.floor((tick % 86400000) / 1000), 1)
  redis.call('PEXPIRE', KEYS[#KEYS - 1], ARGV[A_FANNED])
end
return reply(out)
