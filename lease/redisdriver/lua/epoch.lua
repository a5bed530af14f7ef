-- KEYS: epoch, dueinfo (a bucket's). ARGV (epochArgs): max_ttl_ms, seen (µs: the
-- caller's highest trusted fence of the bucket), lost (1: the caller found
-- the bucket's server lost its data).
-- Creates the epoch if missing, as an acquire would, and checks the server
-- did not restart or roll back (lib.lua's quarantine): a bucket found
-- without one (a new Redis, or a shard that lost its data), on a server
-- that restarted, or without a fence the caller saw, or one lost says,
-- grants nothing for max_ttl. Returns the quarantine left (ms) and 1 when
-- this call found the loss, 2 when by a fence seen (a rollback), else 0.
local left, _, found, rolled = quarantine(KEYS[1], math.floor(now_us() / 1000), tonumber(ARGV[A_MAX_TTL]),
  tonumber(ARGV[A_SEEN]), ARGV[A_LOST] == '1', bucket_top(KEYS[2]))
if rolled then return {left, 2} end
if found then return {left, 1} end
return {left, 0}
