-- KEYS: epoch, due, dueinfo, entities (the task's hash), followups (the
--   task's), then the tick's claims (when chunks ~= ''), then the hashes of
--   the requests the batch's due entries answer.
-- ARGV: max_ttl_ms, holder (escaped), member_prefix (escaped task .. ':'),
--   ttl_ms, reason, tick_ms (0: not a tick run), queue (0|1), chunks
--   ('' or "t:m:id …": triple t holds the m entities of chunk id of the
--   tick's entity stream) -- shared by the batch -- then a triple per
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
-- This is the fan-out's hot path (README, "Speed"): one HMGET reads the whole
-- batch and one HSET writes it. cur holds what this call already wrote, so
-- an entity asked for twice in one batch is granted once.
local ARGV = ARGV
local now = now_us()
local now_ms = math.floor(now / 1000)
local now_s, now_ms_s = num(now), num(now_ms)
local max_ttl, holder, mprefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local q, lost_at = quarantine(KEYS[1], now_ms, max_ttl)
local out = {}
local nt = (#ARGV - 8) / 3
local n, cm, cid, cms = nt, {}, {}, {}
if ARGV[8] ~= '' then
  for t, m, id in string.gmatch(ARGV[8], '(%d+):(%d+):(%x+)') do
    t = tonumber(t)
    cm[t], cid[t], cms[t], n = tonumber(m), id, m, n + tonumber(m) - 1
  end
end
if q > 0 then
  for i = 1, n do out[i] = reply_quarantine(num(q)) end
  return reply(out)
end
local ttl, reason, tick_s, queue = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local tick = tonumber(tick_s)
local exp_s = num(now_ms + ttl)
local refused
if tick > now_ms + EARLY_MS then
  -- A replica whose clock runs ahead must not start a tick before the
  -- others could: Redis's clock decides when a tick has come.
  refused = reply_early(num(tick - now_ms))
elseif tick > 0 and tick < lost_at then
  -- The tick may have run before Redis lost its records: never twice.
  refused = reply_ran(num(lost_at))
end
if refused then
  for i = 1, n do out[i] = refused end
  return reply(out)
end
-- A chunk's j-th token ends with POSITION[j].
local POSITION = {'1|', '2|', '3|', '4|', '5|', '6|', '7|', '8|', '9|', '10|', '11|', '12|', '13|', '14|', '15|', '16|'}
-- The entities to read: field, token (in two pieces: a chunk's prefix and
-- its entity's position), due entry, and the position of its answer (a
-- taken chunk has one for all its entities).
local fs, toks, tsfx, froms, pos, nf, o = {}, {}, {}, {}, {}, 0, 0
local taken_reply = reply_ran(tick_s)
for t = 1, nt do
  local b, m = 6 + 3 * t, cm[t]
  if not m then
    o, nf = o + 1, nf + 1
    fs[nf], toks[nf], tsfx[nf], froms[nf], pos[nf] = ARGV[b], ARGV[b + 1], '', ARGV[b + 2], o
  elseif redis.call('SADD', KEYS[6], cid[t]) == 0 then
    o = o + 1
    out[o] = taken_reply .. '*' .. cms[t]
  else
    local s, prefix, p, q, j = ARGV[b], ARGV[b + 1], 1, 0, 0
    while q do
      q, j = find(s, ' ', p, true), j + 1
      o, nf = o + 1, nf + 1
      fs[nf], toks[nf], tsfx[nf], froms[nf], pos[nf] = sub(s, p, (q or 0) - 1), prefix, POSITION[j] or (j .. '|'), '', o
      p = (q or 0) + 1
    end
    if j ~= m then
      return redis.error_reply('acquire: chunk ' .. t .. ' has ' .. j .. ' fields, not ' .. m)
    end
  end
end
if ARGV[8] ~= '' then redis.call('PEXPIRE', KEYS[6], CLAIMS_TTL_MS) end
local vals = {}
if nf > 0 then vals = redis.call('HMGET', KEYS[4], unpack(fs)) end
local cur, writes, e = {}, {}, {}
for k = 1, nf do
  local i, field, from_s = pos[k], fs[k], froms[k]
  local claim, run_tick, reqs = '', tick_s, ''
  if from_s ~= '' then
    local from = decode_from(from_s)
    claim, reqs = from.claim, from.reqs
    if tick == 0 then run_tick = from.tick end
  end
  -- The common cases need no decoding (lib.lua's grant_fast): a free
  -- entity granted, or one whose tick already ran.
  local v, fast, fence = cur[field] or vals[k], nil, nil
  if v then
    fast, fence = grant_fast(v, tick, tick_s, now, now_s, now_ms_s, toks[k], tsfx[k], exp_s, reason, run_tick, holder)
  end
  local changed, ran = false, fast == 'ran'
  if ran then
    out[i] = reply_ran(fence) -- with 'ran', grant_fast answers the last tick
  elseif fast then
    stage(cur, writes, field, fast)
    out[i] = fence
  else
    entity(v, e)
    local lt = 0
    if tick > 0 then lt = tonumber(e.last_tick) end
    ran = tick > 0 and lt >= tick
    if ran then
      out[i] = reply_ran(e.last_tick)
    elseif is_held(e, now_ms) then
      if queue == '1' and e.fu ~= '1' then
        e.fu, changed = '1', true
      end
      if reqs ~= '' and queue == '1' then
        redis.call('HSET', KEYS[5], field, join_reqs(redis.call('HGET', KEYS[5], field) or '', reqs))
      elseif reqs ~= '' then
        answer(6, reqs, field, ANSWER_SKIPPED)
      end
      out[i] = reply_busy(e)
    else
      -- Fences outlive every key: the server clock in microseconds keeps
      -- them increasing after a sweep or after Redis lost its data.
      fence = now_s
      if e.fence ~= '0' and tonumber(e.fence) >= now then fence = num(tonumber(e.fence) + 1) end
      if tick > lt then e.last_tick = tick_s end
      e.fence, e.token, e.exp, e.touched = fence, unbar(toks[k] .. tsfx[k]), exp_s, now_ms_s
      e.reason, e.tick, e.holder = reason, run_tick, holder
      out[i], changed = fence, true
    end
  end
  if changed then
    v = encode_entity(e)
    stage(cur, writes, field, v)
  end
  -- A due entry is done with once granted, or once it became a follow-up.
  if claim ~= '' and not ran then ack(KEYS[2], KEYS[3], mprefix .. field, claim) end
end
if #writes > 0 then redis.call('HSET', KEYS[4], unpack(writes)) end
return reply(out)
