-- KEYS: epoch (a bucket's). ARGV (epochArgs): max_ttl_ms.
-- Creates the epoch if missing, as an acquire would, and checks the server
-- did not restart (lib.lua's quarantine): a bucket found without one (a new
-- Redis, or a shard that lost its data), or on a server that restarted,
-- grants nothing for max_ttl. Returns the quarantine left (ms) and 1 when
-- this call found the loss, else 0.
local left, _, found = quarantine(KEYS[1], math.floor(now_us() / 1000), tonumber(ARGV[A_MAX_TTL]))
if found then return {left, 1} end
return {left, 0}
