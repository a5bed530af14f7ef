-- KEYS: entities (a task's hash). ARGV (detachAllArgs): the fields of
--   entities whose index fields one HSCAN page found.
-- Detaches each from its chunk's record into its own value (chunk.lua)
-- and deletes its index field: a reshard moves values only. Returns how
-- many it detached.
local fs = fields(A_FIXED + E_FIELD, E_STRIDE)
local n = detach_many(KEYS[1], fs)
if #fs > 0 then redis.call('HDEL', KEYS[1], unpack(fields(A_FIXED + E_FIELD, E_STRIDE, INDEX_MARK))) end
return n
