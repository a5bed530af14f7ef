-- The chunk path's library (docs/performance.md, "Speed II"), after lib.lua
-- in the scripts that keep a tick's chunks as records.
--
-- Chunk record (Go: chunkRecord), the field CHUNK_MARK .. id of a task's
-- hash, id the chunk's (acquire.lua's chunks):
--   tick|fence|holder|prefix|exp|held|odd|since|ended
-- The state of each of its positions (up to 32) whose bit is not in odd: granted
-- by its last grant (tick, fence, holder escaped, since: ms), position j
-- under the token prefix .. j until exp (ms) while its bit is in held,
-- else released done, the last release at ended (ms). A position whose bit
-- is in odd has its state in its own value, as an entity outside chunks.
-- Bit j - 1 is position j's. Lua's bit library answers signed 32-bit
-- numbers: a mask is stored as u32 makes it (0 to 2^32 - 1), and the mask
-- of m positions is ones(m).
local CHUNK = '^(%d+)|(%d+)|([^|]*)|([^|]*)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)$'

local function u32(x) return x % 4294967296 end
local function ones(m) return 2 ^ m - 1 end

local function decode_chunk(v)
  local c = {}
  c.tick, c.fence, c.holder, c.prefix, c.exp, c.held, c.odd, c.since, c.ended = match(v, CHUNK)
  if not c.tick then return nil end
  return c
end

local function encode_chunk(c)
  return c.tick .. '|' .. c.fence .. '|' .. c.holder .. '|' .. c.prefix .. '|' .. c.exp .. '|' .. c.held .. '|' ..
    c.odd .. '|' .. c.since .. '|' .. c.ended
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
  if not c or bit.band(tonumber(c.odd), b) ~= 0 then return false end
  local e = entity(redis.call('HGET', hash, field))
  if tonumber(c.tick) > tonumber(e.last_tick) then e.last_tick = c.tick end
  e.fence, e.reason, e.tick, e.holder, e.touched = c.fence, REASON_TICK, c.tick, c.holder, c.since
  if bit.band(tonumber(c.held), b) ~= 0 then
    e.token, e.exp = c.prefix .. x.pos, c.exp
  else
    local last = encode_run({outcome = OUTCOME_DONE, start = c.since, ['end'] = c.ended, fence = c.fence,
      reason = REASON_TICK, replica = c.holder})
    free(e, c.ended)
    e.last = last
  end
  c.odd, c.held = num(u32(bit.bor(tonumber(c.odd), b))), num(u32(bit.band(tonumber(c.held), bit.bnot(b))))
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
  if c.odd ~= '0' then return nil end
  if tonumber(c.tick) >= floor then return 'ran' end
  if c.held == '0' or tonumber(c.exp) <= now_ms then return 'grant' end
  if skip and tonumber(c.held) == ones(m) then return 'busy' end
  return nil
end

-- chunk_grant makes c the record of a new grant of its m positions, for
-- tick_s, to holder under the tokens prefix .. j until exp_s, and returns
-- its fence: now, or past the record's last one (as lib.lua's grant).
local function chunk_grant(c, now, now_s, now_ms_s, tick_s, holder, prefix, exp_s, m)
  local fence = now_s
  if c.fence and tonumber(c.fence) >= now then fence = num(tonumber(c.fence) + 1) end
  c.tick, c.fence, c.holder, c.prefix, c.exp = tick_s, fence, holder, prefix, exp_s
  c.held, c.odd, c.since, c.ended = num(ones(m)), '0', now_ms_s, '0'
  return fence
end

-- by_grant calls apply(c, mask) for each grant of the script's arguments
-- (grantArgs: a field of one of its entities, its token prefix, the mask of
-- its positions asked about) whose record c in hash is its chunk's and
-- still its own (same prefix, not expired), with mask the positions asked
-- about that the grant holds (not odd), writes the records applied to,
-- and answers each grant's mask (0: none).
local function by_grant(hash, now_ms, apply)
  local n = (#ARGV - A_FIXED) / E_STRIDE
  local ix = redis.call('HMGET', hash, unpack(fields(A_FIXED + E_FIELD, E_STRIDE, INDEX_MARK)))
  local out, recs, cf = {}, {}, {}
  for i = 1, n do
    local x = ix[i] and decode_index(ix[i])
    if x then cf[i] = CHUNK_MARK .. x.id end
  end
  local want, nw = {}, 0
  for i = 1, n do
    if cf[i] and not recs[cf[i]] then
      nw = nw + 1
      want[nw] = cf[i]
      recs[cf[i]] = false
    end
  end
  if nw > 0 then
    local got = redis.call('HMGET', hash, unpack(want))
    for k = 1, nw do recs[want[k]] = got[k] and decode_chunk(got[k]) end
  end
  local writes, done = {}, {}
  for i = 1, n do
    local b, c = A_FIXED + E_STRIDE * (i - 1), cf[i] and recs[cf[i]]
    out[i] = '0'
    if c and c.prefix == ARGV[b + E_PREFIX] and tonumber(c.exp) > now_ms then
      local mask = u32(bit.band(tonumber(ARGV[b + E_MASK]), tonumber(c.held), bit.bnot(tonumber(c.odd))))
      if mask ~= 0 then
        apply(c, mask)
        out[i] = num(mask)
        if not done[cf[i]] then
          done[cf[i]] = true
          writes[#writes + 1] = cf[i]
          writes[#writes + 1] = false
        end
      end
    end
  end
  for k = 1, #writes, 2 do writes[k + 1] = encode_chunk(recs[writes[k]]) end
  if #writes > 0 then redis.call('HSET', hash, unpack(writes)) end
  return out
end
