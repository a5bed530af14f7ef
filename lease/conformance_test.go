package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
)

// kit builds stores on one backend: the conformance suite runs against each.
type kit struct {
	// client returns a store on the shared backend; for Redis each call is
	// a new client (as another replica would be), for memory the same store.
	client func(opts Options) *Store
}

func redisKit(t *testing.T) kit { return redisKitOn(t, redistest.Start(t).Addr) }

// replicatedKit runs the suite against a primary with a replica, every
// grant and renewal acknowledged by it (AcksAuto). One pair serves every
// case: each kit has its own key prefix.
func replicatedKit(pair *redistest.Replicated) func(t *testing.T) kit {
	return func(t *testing.T) kit { return redisKitOn(t, pair.Primary.Addr) }
}

// clusterKit runs the suite against a Redis Cluster (three masters with a
// replica each), every grant and renewal acknowledged per shard.
func clusterKit(cl *redistest.Cluster) func(t *testing.T) kit {
	return func(t *testing.T) kit {
		return redisKitWith(t, func() RedisClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) })
	}
}

// redisKitOn builds stores on the Redis at addr with the default
// acknowledgement (AcksAuto).
func redisKitOn(t *testing.T, addr string) kit {
	return redisKitWith(t, func() RedisClient { return redis.NewClient(&redis.Options{Addr: addr}) })
}

// redisKitWith builds stores on the clients newClient makes, one each.
func redisKitWith(t *testing.T, newClient func() RedisClient) kit {
	prefix := "t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	first := true
	return kit{client: func(opts Options) *Store {
		c := newClient()
		t.Cleanup(func() { c.(interface{ Close() error }).Close() })
		s, err := NewRedis(c, prefix, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if first {
			if err := s.InitEpoch(context.Background()); err != nil {
				t.Fatal(err)
			}
			first = false
		}
		return s
	}}
}

func memoryKit(t *testing.T) kit {
	var s *Store
	return kit{client: func(opts Options) *Store {
		if s == nil {
			s = NewMemory(opts)
			t.Cleanup(func() { s.Close() })
		}
		return s
	}}
}

// TestConformance runs every case on every store. A store's servers (a
// replicated pair, a Cluster) start when its subtest runs, so that
// `go test -run TestConformance/memory/Batch` starts none.
func TestConformance(t *testing.T) {
	kits := map[string]func(*testing.T) func(*testing.T) kit{
		"redis":  func(*testing.T) func(*testing.T) kit { return redisKit },
		"memory": func(*testing.T) func(*testing.T) kit { return memoryKit },
		"redis-replicated": func(t *testing.T) func(*testing.T) kit {
			return replicatedKit(redistest.StartReplicated(t, redistest.ReplicatedOptions{}))
		},
		"redis-cluster": func(t *testing.T) func(*testing.T) kit { return clusterKit(redistest.StartCluster(t)) },
	}
	for name, setUp := range kits {
		t.Run(name, func(t *testing.T) {
			mk := setUp(t)
			for _, c := range conformance {
				t.Run(c.name, func(t *testing.T) { c.fn(t, mk(t)) })
			}
		})
	}
}

var conformance = []struct {
	name string
	fn   func(t *testing.T, k kit)
}{
	{"ExclusionUnderContention", testExclusion},
	{"BusySaysWho", testBusy},
	{"TakenOverHolderCannotRelease", testTakenOver},
	{"ReleaseThenAnswersAsRelease", testReleaseThen},
	{"ExpiryAndTrustWindow", testExpiry},
	{"CheckDoesNotWaitForTheTimer", testCheck},
	{"RenewalKeepsLease", testRenewal},
	{"BatchLeasesLiveApart", testBatchTrust},
	{"GrantedWhileClosing", testGrantedWhileClosing},
	{"CloseReportsLeasesStillHeld", testCloseReportsHeld},
	{"UnlockRevokes", testUnlock},
	{"UnlockTellsItsOwnHolderAtOnce", testUnlockOwnLease},
	{"UnlockRevokedLeaseExpires", testUnlockExpires},
	{"ForceUnlockFrees", testForceUnlock},
	{"DuplicateInOneBatch", testDuplicateInBatch},
	{"Retention", testRetention},
	{"FencesIncrease", testFences},
	{"OncePerTick", testOncePerTick},
	{"FollowUp", testFollowUp},
	{"FollowUpCarriesItsTick", testFollowUpTick},
	{"ReleaseWithNext", testReleaseNext},
	{"ChainKeepsItsTick", testChainTick},
	{"DueTakenOnce", testDueTakenOnce},
	{"DueVisibilityTimeout", testVisibility},
	{"BusyDueEntryBecomesFollowUp", testBusyDue},
	{"RequestsAnsweredByTheirRuns", testRequests},
	{"Batch", testBatch},
	{"EarlyTickRefused", testEarly},
	{"HostileIDs", testHostileIDs},
	{"Status", testStatus},
	{"EntityState", testEntityState},
	{"TickRecords", testTickRecords},
	{"HistoryRetention", testHistoryRetention},
	{"FailuresAndActions", testFailuresAndActions},
	{"Histories", testHistories},
	{"Pauses", testPauses},
	{"EntityPage", testEntityPage},
	{"TaskRegistry", testTaskRegistry},
}

var bg = context.Background()

func req(entity string, ttl time.Duration) Request {
	return Request{Task: "t", Entity: entity, TTL: ttl, Reason: ReasonTrigger}
}

func mustAcquire(t *testing.T, s *Store, r Request) *Lease {
	t.Helper()
	l, err := s.Acquire(bg, r)
	if err != nil {
		t.Fatalf("acquire %s: %v", r.Entity, err)
	}
	return l
}

func mustRelease(t *testing.T, l *Lease) Released {
	t.Helper()
	r, err := l.Release(bg, Finished{Outcome: OutcomeDone, Started: l.Acquired, Ended: time.Now()}, nil)
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
