-- KEYS: epoch (a bucket's). ARGV (epochArgs): max_ttl_ms.
-- Creates the epoch if missing, as an acquire would: a bucket found without
-- one (a new Redis, or a shard that lost its data) grants nothing for
-- max_ttl. Returns the quarantine left (ms).
return quarantine(KEYS[1], math.floor(now_us() / 1000), tonumber(ARGV[A_MAX_TTL]))
