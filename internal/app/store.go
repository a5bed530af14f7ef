package app

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/redisconn"
	"github.com/tickd/tickd/lease/memdriver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// OpenStore opens the lease store cfg describes: in Redis when it
// has a [redis] table (its client, key prefix and replica_acks), else in
// this process. opts gives the rest (Replica, Clock, callbacks); the
// quarantine's bound at open (Options.MaxTTL) is raised to the config's
// longest lease_ttl (CoverTTL raises it later, not below it: a store opened
// with the 1m default and covered with 2s would quarantine a fresh Redis
// for 1m). The store owns the Redis client it opened: its Stop closes it
// (Options.Closer).
//
// The store wants each task's shards as the config gives them
// (Store.WantShards): whichever process first writes for a task (a
// replica's tick, a trigger) records the config's count.
func OpenStore(c *config.Config, opts lease.Options) (*lease.Store, error) {
	return openStoreWith(c, opts, nil)
}

// openStoreWith is OpenStore on client, a program's own Redis client, when
// not nil: the store then leaves it open when it stops.
func openStoreWith(c *config.Config, opts lease.Options, client redis.UniversalClient) (*lease.Store, error) {
	opts.MaxTTL = max(opts.MaxTTL, c.MaxLeaseTTL())
	var s *lease.Store
	switch {
	case c.Redis == nil:
		s = lease.New(memdriver.New(), opts)
	case client != nil:
		d, err := redisdriver.New(client, c.Redis.KeyPrefix, c.Redis.ReplicaAcks)
		if err != nil {
			return nil, err
		}
		s = lease.New(d, opts)
	default:
		rc, err := redisconn.Client(c.Redis)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Path, err)
		}
		opts.Closer = rc
		d, err := redisdriver.New(rc, c.Redis.KeyPrefix, c.Redis.ReplicaAcks)
		if err != nil {
			rc.Close()
			return nil, err
		}
		s = lease.New(d, opts)
	}
	for _, t := range c.Tasks {
		s.WantShards(t.Name, t.Shards)
	}
	return s, nil
}
