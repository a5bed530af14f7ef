-- KEYS: a probe key. ARGV: value. A small write for Store.Replication to
-- see acknowledged; it expires after a minute.
redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return 1
