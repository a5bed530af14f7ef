-- KEYS: epoch (a bucket's). ARGV (successorsArgs): the run_ids of this
-- server's replicas, comma-joined, as a store just read them.
-- Records them in the epoch, so that one of them promoted in this server's
-- place is not taken for a restart (lib.lua's quarantine); only when the
-- epoch is this server's (a store that read the replicas of a server since
-- replaced leaves it). Returns 1 when it wrote, else 0.
local v = redis.call('GET', KEYS[1])
local ep = v and decode_epoch(v)
if not ep or ep.run ~= server_run() or ep.successors == ARGV[A_RUNS] then return 0 end
ep.successors = ARGV[A_RUNS]
redis.call('SET', KEYS[1], encode_epoch(ep))
return 1
