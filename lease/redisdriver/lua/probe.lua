-- KEYS: a probe key. ARGV (probeArgs): value. A small write for Store.Replication to
-- see acknowledged; it expires after a minute.
redis.call('SET', KEYS[1], ARGV[A_VALUE], 'PX', 60000)
return 1
