package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/memdriver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// kit builds stores on one backend: the conformance suite runs against each.
// NewRedis is a Store over Redis under prefix, its acknowledgement acks
// (AcksAuto unless given): lease itself imports no driver.
func NewRedis(c RedisClient, prefix string, opts Options, acks ...driver.ReplicaAcks) (*Store, error) {
	a := driver.AcksAuto
	if len(acks) > 0 {
		a = acks[0]
	}
	d, err := redisdriver.New(c, prefix, a)
	if err != nil {
		return nil, err
	}
	return New(d, opts), nil
}

// NewMemory is a Store in this process.
func NewMemory(opts Options) *Store { return New(memdriver.New(), opts) }

// The Redis driver's names the tests use (lease has none).
type (
	RedisClient = redisdriver.RedisClient
	LayoutError = redisdriver.LayoutError
)

const LayoutVersion = redisdriver.LayoutVersion

var (
	ErrLayout          = redisdriver.ErrLayout
	ErrReplicasRunning = redisdriver.ErrReplicasRunning
	TaskKey            = redisdriver.TaskKey
	SameBucket         = redisdriver.SameBucket
)

type kit struct {
	// client returns a store on the shared backend; for Redis each call is
	// a new client (as another replica would be), for memory the same store.
	client func(opts Options) *Store
	// clientAcks is client with the Redis driver's acknowledgement (for
	// memory, the one store).
	clientAcks func(acks driver.ReplicaAcks, opts Options) *Store
}

func redisKit(t *testing.T) kit { return redisKitOn(t, redistest.Start(t).Addr) }

// redisKitOn builds stores on the Redis at addr with the default
// acknowledgement (AcksAuto).
func redisKitOn(t *testing.T, addr string) kit {
	return redisKitWith(t, func() RedisClient { return redis.NewClient(&redis.Options{Addr: addr}) })
}

// redisKitWith builds stores on the clients newClient makes, one each.
func redisKitWith(t *testing.T, newClient func() RedisClient) kit {
	prefix := "t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	first := true
	var k kit
	k.clientAcks = func(acks driver.ReplicaAcks, opts Options) *Store {
		c := newClient()
		t.Cleanup(func() { c.(interface{ Close() error }).Close() })
		s, err := NewRedis(c, prefix, opts, acks)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(bg) })
		if first {
			if err := s.InitEpoch(context.Background()); err != nil {
				t.Fatal(err)
			}
			first = false
		}
		return s
	}
	k.client = func(opts Options) *Store { return k.clientAcks(driver.AcksAuto, opts) }
	return k
}

func memoryKit(t *testing.T) kit {
	var s *Store
	client := func(opts Options) *Store {
		if s == nil {
			s = NewMemory(opts)
			t.Cleanup(func() { s.Stop(bg) })
		}
		return s
	}
	return kit{client: client, clientAcks: func(_ driver.ReplicaAcks, opts Options) *Store { return client(opts) }}
}

// TestProtocol runs the protocol's own cases (how a Store trusts, renews
// and closes over its leases: they need its insides) on both drivers; the
// driver's promises are lease/drivertest's, run by TestConformance.
func TestProtocol(t *testing.T) {
	kits := map[string]func(*testing.T) kit{"redis": redisKit, "memory": memoryKit}
	for name, mk := range kits {
		t.Run(name, func(t *testing.T) {
			for _, c := range protocol {
				t.Run(c.name, func(t *testing.T) { c.fn(t, mk(t)) })
			}
		})
	}
}

var protocol = []struct {
	name string
	fn   func(t *testing.T, k kit)
}{
	{"TakenOverHolderCannotRelease", testTakenOver},
	{"ReleaseThenAnswersAsRelease", testReleaseThen},
	{"ExpiryAndTrustWindow", testExpiry},
	{"BatchLeasesLiveApart", testBatchTrust},
	{"GrantedWhileClosing", testGrantedWhileClosing},
	{"FencesIncrease", testFences},
}

var bg = context.Background()

func req(entity string, ttl time.Duration) driver.Request {
	return driver.Request{Task: "t", Entity: entity, TTL: ttl, Reason: driver.ReasonTrigger}
}

func mustAcquire(t *testing.T, s *Store, r driver.Request) *Lease {
	t.Helper()
	l, err := s.Acquire(bg, r)
	if err != nil {
		t.Fatalf("acquire %s: %v", r.Entity, err)
	}
	return l
}

func mustRelease(t *testing.T, l *Lease) Released {
	t.Helper()
	r, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeDone, Started: l.Acquired, Ended: time.Now()}, nil)
	if err != nil {
		t.Fatalf("release %s: %v", l.Entity, err)
	}
	return r
}

// waitCause waits until the lease's context is cancelled and returns the cause.
func waitCause(t *testing.T, l *Lease, d time.Duration) error {
	t.Helper()
	select {
	case <-l.Context().Done():
		return context.Cause(l.Context())
	case <-time.After(d):
		t.Fatalf("lease %s not cancelled within %v", l.Entity, d)
		return nil
	}
}

// dues lists every due entry.
func dues(t *testing.T, s *Store) []driver.Due {
	t.Helper()
	var ds []driver.Due
	if err := s.Fleet().DueEntries(bg, "", func(d driver.Due) error { ds = append(ds, d); return nil }); err != nil {
		t.Fatal(err)
	}
	return ds
}

// redisClient is the Redis client under a store on the Redis driver (its
// concrete type is the driver's own: reached through the method).
func redisClient(s *Store) RedisClient {
	return s.Driver().(interface{ Client() RedisClient }).Client()
}
