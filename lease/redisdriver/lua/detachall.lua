-- KEYS: entities (a task's hash). ARGV (detachAllArgs): the fields of
--   entities whose index fields one HSCAN page found.
-- Detaches each from its chunk's record into its own value (chunk.lua)
-- and deletes its index field: a reshard moves values only. Returns how
-- many it detached.
local n, idx = 0, {}
for i = A_FIXED + E_FIELD, #ARGV, E_STRIDE do
  if detach(KEYS[1], ARGV[i]) then n = n + 1 end
  idx[#idx + 1] = INDEX_MARK .. ARGV[i]
end
if #idx > 0 then redis.call('HDEL', KEYS[1], unpack(idx)) end
return n
