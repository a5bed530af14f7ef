-- KEYS: due, dueinfo, entities (the task's hash), followups (the task's),
--   then the hashes of the requests the batch's runs answer, then the
--   shard's layout key (shards_refused).
-- ARGV (releaseArgs): member_prefix (escaped task .. ':'), stride (3 or 5),
--   shards (shards_refused), twice (1: an entity comes twice), records (1:
--   entities may be in chunk records, chunk.lua), then for each
--   lease: field, token (between its separators: lib.lua's unbar), last,
--   next, reqs; with stride 3 (a batch of plain releases, the fan-out's
--   usual) next and reqs are left out, as ''.
-- last is the run record (encode_run's format), written by the holder (its
-- token proves the fence and reason are this lease's); next is '' or the next
-- run asked for (decode_next). A next carries the run's tick, which the
-- grant stored; a follow-up carries the latest tick of the requests that
-- queued it (decode_followup). reqs are the ids of the requests the run
-- answers with its outcome; a run handed over (next's carry) passes them on
-- to the next run instead, as a follow-up takes the ids of the triggers it
-- stands for.
-- A lease whose token does not hold it (bare, or with unlock.lua's REVOKED
-- mark) is left alone (a taken-over holder
-- must not release the new holder's lease): RELEASED_NOT_HELD. Otherwise the
-- lease is freed, the run recorded, and next or a requested follow-up
-- enqueued: RELEASED_OK, or RELEASED_FOLLOW_UP when a follow-up was asked for;
-- either followed by ':' and a tick (ms) when the run enqueued took the
-- place of the entity's tick run waiting for a limit (add_due).
local ARGV = ARGV
if shards_refused(KEYS[#KEYS], ARGV[A_SHARDS]) then return redis.error_reply(SHARDS_CHANGED) end
local now_ms = math.floor(now_us() / 1000)
local now_ms_s = num(now_ms)
local mprefix, stride = ARGV[A_PREFIX], tonumber(ARGV[A_STRIDE])
local out = {}
local n = (#ARGV - A_FIXED) / stride
local fs = fields(A_FIXED + E_FIELD, stride)
-- With RECORDS (a lease of a chunk's grant is among them: its run did not
-- end done, or its grant no longer answers for it, grantrelease.lua), its
-- entity may still be in its chunk's record, in a task that ever kept one
-- (the field CHUNK_MARK alone marks it): detached into its value first
-- (chunk.lua).
if ARGV[A_RECORDS] == '1' and redis.call('HEXISTS', KEYS[3], CHUNK_MARK) == 1 then detach_many(KEYS[3], fs) end
local vals = redis.call('HMGET', KEYS[3], unpack(fs))
-- With twice, cur holds what this call already wrote, so that a second
-- lease of one entity is read against it.
local twice, cur, writes, nw, e = ARGV[A_TWICE] == '1', {}, {}, 0, {}
local release_fast = release_fast_for(now_ms_s)
for i = 1, n do
  local b = A_FIXED + stride * (i - 1)
  local field, nxt, reqs = ARGV[b + E_FIELD], '', ''
  if stride == E_STRIDE then nxt, reqs = ARGV[b + E_NEXT], ARGV[b + E_REQS] end
  -- The common case needs no decoding (lib.lua's release_fast): held by
  -- this token, nothing asked for after the run.
  local v = vals[i]
  if twice then v = cur[field] or v end
  local fast = v and reqs == '' and nxt == '' and release_fast(v, ARGV[b + E_TOKEN], ARGV[b + E_RECORD])
  if fast then
    writes[nw + 1], writes[nw + 2], nw = field, fast, nw + 2
    if twice then cur[field] = fast end
    out[i] = RELEASED_OK
  else
    entity(v, e)
    -- A revoked lease (unlock.lua) is still its holder's to release.
    local tok = unbar(ARGV[b + E_TOKEN])
    if (e.token ~= tok and e.token ~= REVOKED .. tok and e.token ~= REPLACED .. tok) or not is_held(e, now_ms) then
      if reqs ~= '' then answer(5, reqs, field, decode_run(ARGV[b + E_RECORD]).outcome) end
      out[i] = RELEASED_NOT_HELD
    else
      local fu, run_tick = e.fu, e.tick
      release(e, now_ms_s, ARGV[b + E_RECORD])
      local fu_reqs, fu_tick = '', run_tick
      local fu_reason = REASON_QUEUED
      if fu == FU_REPLACE then fu, fu_reason = '1', REASON_REPLACED end
      if fu == '1' then
        local f = decode_followup(redis.call('HGET', KEYS[4], field))
        fu_reqs = f.reqs
        if f.tick ~= '0' then fu_tick = f.tick end
        if buffer_next(f) then
          -- More ticks buffered (queue_max): the next is the follow-up of
          -- the run enqueued here.
          e.fu = '1'
          redis.call('HSET', KEYS[4], field, encode_followup(f))
        else
          redis.call('HDEL', KEYS[4], field)
        end
      end
      v = encode_entity(e)
      writes[nw + 1], writes[nw + 2], nw = field, v, nw + 2
      if twice then cur[field] = v end
      local x = nxt ~= '' and decode_next(nxt)
      if reqs ~= '' and not (x and x.carry == '1') then
        answer(5, reqs, field, decode_run(ARGV[b + E_RECORD]).outcome)
        reqs = ''
      end
      local sup
      if x then
        -- A follow-up folded into the next run: it carries the follow-up's tick.
        sup = add_due(KEYS[1], KEYS[2], mprefix .. field, x.reason, now_ms + tonumber(x.delay_ms), x.attempt, fu_tick,
          join_reqs(reqs, fu_reqs))
      elseif fu == '1' then
        sup = add_due(KEYS[1], KEYS[2], mprefix .. field, fu_reason, now_ms, '0', fu_tick, fu_reqs)
      end
      if fu == '1' then out[i] = RELEASED_FOLLOW_UP else out[i] = RELEASED_OK end
      -- The tick of a waiting run that the run enqueued took the place of.
      if type(sup) == 'string' then out[i] = out[i] .. ':' .. sup end
    end
  end
end
if nw > 0 then redis.call('HSET', KEYS[3], unpack(writes)) end
return reply(out)
