-- KEYS: entities (the task's hash). ARGV (unlockArgs): field, by (escaped), mode
-- (UNLOCK_REVOKE or UNLOCK_FORCE), the revocations channel, the task
-- (escaped).
-- Either mode publishes "TASK FIELD FENCE REVOCATION_REVOKED" (revoked) or
-- "… REVOCATION_FREED" (freed) on the channel: the holder, told at once,
-- stops its run (or does not start it) without waiting for its next
-- renewal. A publish refused (an ACL without the channel) changes nothing:
-- the renewal tells the holder all the same.
-- UNLOCK_REVOKE revokes the lease: its token gets the REVOKED mark, so the
-- holder's next renewal is refused (RENEWED_REVOKED) while the lease stays
-- held, and busy for everyone else, until the holder releases it (release.lua
-- takes the marked token as its own) or it expires. The run's record is the
-- holder's to write.
-- UNLOCK_FORCE frees the lease at once whatever its token and records it as
-- the last run: outcome OUTCOME_UNLOCKED, ended now, on its holder, with
-- "unlocked by WHO" as its error (Go's LastRun.By).
-- Returns {holder, since, fence, exp, state} of the lease unlocked, state
-- UNLOCKED_FREED, UNLOCKED_REVOKED or UNLOCKED_ALREADY (a revoked lease
-- revoked again); {} when none was held.
local now_ms = math.floor(now_us() / 1000)
local now_ms_s = num(now_ms)
-- An entity its chunk's record holds is detached into its value first
-- (chunk.lua).
detach(KEYS[1], ARGV[A_FIELD])
local e = entity(redis.call('HGET', KEYS[1], ARGV[A_FIELD]))
if not is_held(e, now_ms) then return {} end
local holder, since, exp = e.holder, e.touched, e.exp
if ARGV[A_MODE] == UNLOCK_REVOKE then
  if sub(e.token, 1, #REVOKED) == REVOKED then return {holder, since, e.fence, exp, UNLOCKED_ALREADY} end
  e.token = REVOKED .. e.token
  redis.call('HSET', KEYS[1], ARGV[A_FIELD], encode_entity(e))
  redis.pcall('PUBLISH', ARGV[A_CHANNEL], ARGV[A_TASK] .. ' ' .. ARGV[A_FIELD] .. ' ' .. e.fence .. ' ' .. REVOCATION_REVOKED)
  return {holder, since, e.fence, exp, UNLOCKED_REVOKED}
end
e.last = encode_run({outcome = OUTCOME_UNLOCKED, start = since, ['end'] = now_ms_s, fence = e.fence,
  reason = e.reason, replica = holder, error = UNLOCKED_BY .. ARGV[A_BY]})
local fence = e.fence
free(e, now_ms_s)
redis.call('HSET', KEYS[1], ARGV[A_FIELD], encode_entity(e))
redis.pcall('PUBLISH', ARGV[A_CHANNEL], ARGV[A_TASK] .. ' ' .. ARGV[A_FIELD] .. ' ' .. fence .. ' ' .. REVOCATION_FREED)
return {holder, since, fence, exp, UNLOCKED_FREED}
