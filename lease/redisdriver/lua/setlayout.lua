-- KEYS: a shard's layout key. ARGV (setLayoutArgs): value (ending in
-- @generation), generation, over ('le': over a key of this generation or
-- an older one; 'lt': over an older one only, a repair).
-- A layout key is written only by a generation at least its own: a
-- reshard whose lock was lost cannot write its layout over a later one's,
-- and a repair (a key a rolled-back master took back to an older layout)
-- never over a reshard under way. A key without a generation (a tickd
-- before them) is generation 0; no key at all, -1. Returns 1 when it wrote.
local got = redis.call('GET', KEYS[1])
local have = -1
if got then have = tonumber(string.match(got, '@(%d+)$') or '0') end
local gen = tonumber(ARGV[A_GEN])
if have > gen or (have == gen and ARGV[A_OVER] ~= 'le') then return 0 end
redis.call('SET', KEYS[1], ARGV[A_VALUE])
return 1
