package lease

import (
	"context"
	"errors"

	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// NewRedis returns a Store whose leases live in Redis under prefix. Replicas
// that share the Redis and the prefix coordinate. Stop the Store when done;
// the client is the caller's (or the store's to close, given as Options.Closer).
func NewRedis(c RedisClient, prefix string, opts Options) (*Store, error) {
	d, err := redisdriver.New(c, prefix, opts.ReplicaAcks)
	if err != nil {
		return nil, err
	}
	return New(d, opts), nil
}

// The Redis driver's names, for callers of lease.
type (
	// RedisClient is what the Redis store needs of a go-redis client: a
	// *redis.Client, a failover client (Sentinel) or a *redis.ClusterClient.
	RedisClient = redisdriver.RedisClient
	// LayoutError says which keys of another key layout were found.
	LayoutError = redisdriver.LayoutError
)

// LayoutVersion is the Redis key layout this tickd reads and writes.
const LayoutVersion = redisdriver.LayoutVersion

var (
	// ErrLayout is matched by a *LayoutError.
	ErrLayout = redisdriver.ErrLayout
	// ErrReplicasRunning is returned when Migrate finds replicas
	// announcing their tasks.
	ErrReplicasRunning = redisdriver.ErrReplicasRunning
)

// TaskKey is the Redis key of task's entities under prefix.
func TaskKey(prefix, task string) string { return redisdriver.TaskKey(prefix, task) }

// SameBucket says whether tasks a and b share a bucket (a hash slot).
func SameBucket(a, b string) bool { return redisdriver.SameBucket(a, b) }

// ValidPrefix reports whether p can be used as a key prefix.
func ValidPrefix(p string) bool { return redisdriver.ValidPrefix(p) }

// CheckLayout returns a *LayoutError when the prefix holds keys of an
// older key layout or names a newer one: what the store reads there would
// not be what the replicas running beside it write. Nil for a driver with
// no layout (the in-process one).
func (s *Store) CheckLayout(ctx context.Context) error {
	if d, ok := s.b.(interface{ CheckLayout(context.Context) error }); ok {
		return d.CheckLayout(ctx)
	}
	return nil
}

// Migrate moves the keys of layout 1 (tickd before buckets) into this
// layout (the Redis driver's Migrate says how). Every tickd must be stopped
// first.
func (s *Store) Migrate(ctx context.Context) (Migrated, error) {
	if d, ok := s.b.(interface {
		Migrate(context.Context) (Migrated, error)
	}); ok {
		return d.Migrate(ctx)
	}
	return Migrated{}, errors.New("lease: migrate: the in-process store has no keys")
}

// Reshard keeps task in n shards from now on, moving what its entities
// have to their new shards (the Redis driver's Reshard says how); it
// refuses while a replica runs the task.
func (s *Store) Reshard(ctx context.Context, task string, n int) (Resharded, error) {
	d, ok := s.b.(interface {
		Reshard(context.Context, string, int) (Resharded, error)
	})
	if !ok {
		return Resharded{}, errors.New("lease: reshard: the in-process store has no keys")
	}
	r, err := d.Reshard(ctx, task, n)
	if err == nil {
		s.shards.mu.Lock()
		delete(s.shards.counts, task) // read again
		s.shards.mu.Unlock()
	}
	return r, err
}

// Replication probes the replicas: one small write (a key that expires in a
// minute) and one WAIT, as a lease write does. The in-process store has no
// replicas.
func (s *Store) Replication(ctx context.Context) (Replication, error) {
	if d, ok := s.b.(interface {
		Replication(context.Context) (Replication, error)
	}); ok {
		return d.Replication(ctx)
	}
	return Replication{Role: "in-process", Mode: AcksNever}, nil
}

// The replication vocabulary (package driver's).
type (
	// ReplicaAcks is how many replicas must acknowledge a lease write.
	ReplicaAcks = driver.ReplicaAcks
	// AckError says a lease write was not acknowledged by enough replicas.
	AckError = driver.AckError
	// Replication is what the primary says of its replicas.
	Replication = driver.Replication
	// Migrated is what Store.Migrate moved to this layout.
	Migrated = driver.Migrated
	// Resharded is what Store.Reshard moved.
	Resharded = driver.Resharded
)

// The ReplicaAcks settings with names.
const (
	AcksAuto  = driver.AcksAuto
	AcksNever = driver.AcksNever
)

// ErrNotAcknowledged is matched by an *AckError.
var ErrNotAcknowledged = driver.ErrNotAcknowledged
