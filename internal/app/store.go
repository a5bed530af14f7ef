package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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

// CloseStore stops a store OpenStore opened for one operator command,
// within 2s: a lease still held was reported by its release.
func CloseStore(s *lease.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.Stop(ctx)
}

// OpenConsole builds the App of a process that serves the console alone
// (tickd web): the store on cfg's Redis, and no scheduler and no tracer;
// the console is a Part its caller adds. Start starts the store and the
// parts, Reload shows the parts the new config, Stop stops them and the
// store.
func OpenConsole(cfg *config.Config, opts lease.Options, log *slog.Logger) (*App, error) {
	s, err := OpenStore(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &App{Log: log, Replica: opts.Replica, Store: s, config: cfg}, nil
}
