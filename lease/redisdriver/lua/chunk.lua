-- The chunk path's library (docs/performance.md, "Speed II"), after lib.lua
-- in the scripts that keep a tick's chunks as records.
--
-- Chunk record (Go: chunkRecord), the field CHUNK_MARK .. id of a task's
-- hash, id the chunk's (acquire.lua's chunks): binary, so that a script
-- reads and rewrites its numbers without parsing text (Redis's struct
-- library), big-endian:
--   held u32, ended i64, exp i64, odd u32, tick i64, fence i64, since i64
--   (REC.head bytes), then prefix '|' holder
-- The state of each of its positions (up to 32) whose bit is not in odd: granted
-- by its last grant (tick, fence, holder escaped, since: ms), position j
-- under the token prefix .. j until exp (ms) while its bit is in held,
-- else released done, the last release at ended (ms). A position whose bit
-- is in odd has its state in its own value, as an entity outside chunks.
-- Bit j - 1 is position j's. Lua's bit library answers signed 32-bit
-- numbers: a mask is stored as u32 makes it (0 to 2^32 - 1), and the mask
-- of m positions is ones(m). A release rewrites the first bytes (held,
-- ended: REC.release) and a renewal the next 8 (exp, from REC.exp_at),
-- the rest copied as it is; both read only the first four numbers
-- (REC.lead). REC holds the formats (a script's main function has at most
-- 200 locals, and acquire.lua's is near them).
local REC = {format = '>I4i8i8I4i8i8i8', head = 48, lead = '>I4i8i8I4', release = '>I4i8', exp = '>i8', exp_at = 13,
  bar = string.byte('|')}

local function u32(x) return x % 4294967296 end
local function ones(m) return 2 ^ m - 1 end

-- decode_chunk reads a record into c: its numbers as numbers, its prefix
-- and holder as strings; nil for a value that is not one.
local function decode_chunk(v)
  if #v <= REC.head then return nil end
  local held, ended, exp, odd, tick, fence, since, rest = struct.unpack(REC.format, v)
  local bar = string.find(v, '|', rest, true)
  if not bar then return nil end
  return {held = held, ended = ended, exp = exp, odd = odd, tick = tick, fence = fence, since = since,
    prefix = sub(v, rest, bar - 1), holder = sub(v, bar + 1)}
end

local function encode_chunk(c)
  return struct.pack(REC.format, c.held, c.ended, c.exp, c.odd, c.tick, c.fence, c.since) .. c.prefix .. '|' .. c.holder
end

-- Chunk index (Go: chunkIndex), the field INDEX_MARK .. field of a task's
-- hash: the chunk whose record holds the entity, and its position.
--   id:position
local function decode_index(v)
  local id, pos = match(v, '^([^:]+):(%d+)$')
  if not id then return nil end
  return {id = id, pos = tonumber(pos)}
end

-- detach moves field's state out of its chunk's record into its value in
-- hash (when its index, ix at detach_at, names a record whose position is
-- not odd), so that the per-entity scripts decide it as they do an entity
-- outside chunks:
-- held under the grant's token while the grant holds it (expired or not,
-- as an unreleased lease is), else released done with its run record. The
-- position becomes odd. Returns whether it moved anything.
local function detach_at(hash, field, ix)
  local x = ix and decode_index(ix)
  if not x then return false end
  local rv = redis.call('HGET', hash, CHUNK_MARK .. x.id)
  local c = rv and decode_chunk(rv)
  local b = bit.lshift(1, x.pos - 1)
  if not c or bit.band(c.odd, b) ~= 0 then return false end
  local e = entity(redis.call('HGET', hash, field))
  local tick_s, fence_s, since_s = num(c.tick), num(c.fence), num(c.since)
  if c.tick > tonumber(e.last_tick) then e.last_tick = tick_s end
  e.fence, e.reason, e.tick, e.holder, e.touched = fence_s, REASON_TICK, tick_s, c.holder, since_s
  if bit.band(c.held, b) ~= 0 then
    e.token, e.exp = c.prefix .. x.pos, num(c.exp)
  else
    local ended = num(c.ended)
    local last = encode_run({outcome = OUTCOME_DONE, start = since_s, ['end'] = ended, fence = fence_s,
      reason = REASON_TICK, replica = c.holder})
    free(e, ended)
    e.last = last
  end
  c.odd, c.held = u32(bit.bor(c.odd, b)), u32(bit.band(c.held, bit.bnot(b)))
  redis.call('HSET', hash, field, encode_entity(e), CHUNK_MARK .. x.id, encode_chunk(c))
  return true
end

local function detach(hash, field)
  return detach_at(hash, field, redis.call('HGET', hash, INDEX_MARK .. field))
end

-- detach_many detaches each of fields (one HMGET of their index fields:
-- most have none) and answers how many it moved.
local function detach_many(hash, fields)
  if #fields == 0 then return 0 end
  local ixf = {}
  for i = 1, #fields do ixf[i] = INDEX_MARK .. fields[i] end
  local ixs, n = redis.call('HMGET', hash, unpack(ixf)), 0
  for i = 1, #fields do
    if ixs[i] and detach_at(hash, fields[i], ixs[i]) then n = n + 1 end
  end
  return n
end

-- chunk_answer decides a tick's run of a chunk of m entities from its
-- record c alone (floor: a tick at or after it counts as run; skip: a busy
-- entity is skipped, nothing left behind): 'ran' when the record's tick is
-- at or after floor, 'grant' when its grant holds no position (released, or
-- expired), 'busy' when it holds every one (skip only), nil when a
-- position is odd or the grant holds some: those go entity by entity.
local function chunk_answer(c, m, floor, now_ms, skip)
  if c.odd ~= 0 then return nil end
  if c.tick >= floor then return 'ran' end
  if c.held == 0 or c.exp <= now_ms then return 'grant' end
  if skip and c.held == ones(m) then return 'busy' end
  return nil
end

-- chunk_grant makes c the record of a new grant of its m positions, for
-- tick, to holder under the tokens prefix .. j until exp, and returns its
-- fence: now, or past the record's last one (as lib.lua's grant).
local function chunk_grant(c, now, now_ms, tick, holder, prefix, exp, m)
  local fence = now
  if c.fence and c.fence >= now then fence = c.fence + 1 end
  c.tick, c.fence, c.holder, c.prefix, c.exp = tick, fence, holder, prefix, exp
  c.held, c.odd, c.since, c.ended = ones(m), 0, now_ms, 0
  return fence
end

-- by_grant rewrites, with apply(v, held, mask), each record v of a grant of
-- the script's arguments (grantArgs: its record's field, or a field of one
-- of its entities, whose index names the record; its token prefix; the
-- mask of its positions asked about) that is its chunk's and still its
-- own (same prefix, not expired), with held its held positions and mask
-- those asked about that the grant holds (not odd); writes the records
-- rewritten, and answers each grant's mask (0: none). Only a record's
-- head is read.
local function by_grant(hash, now_ms, apply)
  local n = (#ARGV - A_FIXED) / E_STRIDE
  local out, recs, cf, ixf, ixi = {}, {}, {}, {}, {}
  for i = 1, n do
    local f = ARGV[A_FIXED + E_STRIDE * (i - 1) + E_FIELD]
    if sub(f, 1, 1) == CHUNK_MARK then
      cf[i] = f
    else
      local x = #ixf + 1
      ixf[x], ixi[x] = INDEX_MARK .. f, i
    end
  end
  if #ixf > 0 then
    local ix = redis.call('HMGET', hash, unpack(ixf))
    for k = 1, #ixf do
      local x = ix[k] and decode_index(ix[k])
      if x then cf[ixi[k]] = CHUNK_MARK .. x.id end
    end
  end
  local want, nw = {}, 0
  for i = 1, n do
    if cf[i] and recs[cf[i]] == nil then
      nw = nw + 1
      want[nw] = cf[i]
      recs[cf[i]] = false
    end
  end
  if nw > 0 then
    local got = redis.call('HMGET', hash, unpack(want))
    for k = 1, nw do recs[want[k]] = got[k] end
  end
  local writes, done = {}, {}
  for i = 1, n do
    local b, f = A_FIXED + E_STRIDE * (i - 1), cf[i]
    local v = f and recs[f]
    out[i] = '0'
    if v and #v > REC.head then
      -- Its grant is still the one of the prefix asked about when its own
      -- prefix is that one.
      local held, _, exp, odd = struct.unpack(REC.lead, v)
      local p, at = ARGV[b + E_PREFIX], REC.head + 1
      if exp > now_ms and string.find(v, p, at, true) == at and string.byte(v, at + #p) == REC.bar then
        local asked = tonumber(ARGV[b + E_MASK])
        local mask = u32(bit.band(asked, held, bit.bnot(odd)))
        if mask ~= 0 then
          recs[f] = apply(v, held, mask)
          out[i] = mask == asked and ARGV[b + E_MASK] or num(mask)
          if not done[f] then
            done[f] = true
            writes[#writes + 1] = f
            writes[#writes + 1] = false
          end
        end
      end
    end
  end
  for k = 1, #writes, 2 do writes[k + 1] = recs[writes[k]] end
  if #writes > 0 then redis.call('HSET', hash, unpack(writes)) end
  return out
end
