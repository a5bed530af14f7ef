package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/expect"
	"github.com/tickd/tickd/internal/redistest"
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

func TestConformance(t *testing.T) {
	pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
	cluster := redistest.StartCluster(t)
	kits := map[string]func(*testing.T) kit{"redis": redisKit, "memory": memoryKit, "redis-replicated": replicatedKit(pair),
		"redis-cluster": clusterKit(cluster)}
	for name, mk := range kits {
		t.Run(name, func(t *testing.T) {
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
	{"ForceUnlockCancelsHolder", testUnlock},
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

func testExclusion(t *testing.T, k kit) {
	const workers, entities, rounds = 8, 5, 60
	var inUse [entities]atomic.Int32
	var grants, overlaps atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		s := k.client(Options{Replica: "w" + strconv.Itoa(w)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				e := (i + w) % entities
				l, err := s.Acquire(bg, req(strconv.Itoa(e), time.Second))
				if errors.Is(err, ErrBusy) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				grants.Add(1)
				if inUse[e].Add(1) != 1 {
					overlaps.Add(1)
				}
				inUse[e].Add(-1)
				if _, err := l.Release(bg, Finished{Outcome: OutcomeDone}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping grants", overlaps.Load())
	}
	if grants.Load() < entities {
		t.Fatalf("only %d grants", grants.Load())
	}
}

func testBusy(t *testing.T, k kit) {
	// A replica id may hold the separator of packed values.
	a := k.client(Options{Replica: "A|1"})
	b := k.client(Options{Replica: "B"})
	l := mustAcquire(t, a, req("e", time.Minute))
	_, err := b.Acquire(bg, req("e", time.Minute))
	var be *BusyError
	if !errors.As(err, &be) || !errors.Is(err, ErrBusy) {
		t.Fatalf("second acquire: got %v, want busy", err)
	}
	if be.Holder != "A|1" { // the memory kit's one store is A|1
		t.Errorf("holder %q", be.Holder)
	}
	if be.Fence != l.Fence || time.Since(be.Since) > time.Minute {
		t.Errorf("busy error %+v, lease fence %d", be, l.Fence)
	}
	mustRelease(t, l)
	mustRelease(t, mustAcquire(t, b, req("e", time.Minute)))
}

// takeOver lets a short lease of entity expire unrenewed and acquires it
// again: old is the taken-over holder's, cur the new holder's.
func takeOver(t *testing.T, s *Store, entity string) (old, cur *Lease) {
	t.Helper()
	old = mustAcquire(t, s, req(entity, 300*time.Millisecond))
	old.stopRenewing()
	redistest.WaitFor(t, 5*time.Second, "lease expiry", func() bool {
		l, err := s.Acquire(bg, req(entity, time.Minute))
		cur = l
		return err == nil
	})
	return old, cur
}

func testTakenOver(t *testing.T, k kit) {
	s := k.client(Options{})
	old, cur := takeOver(t, s, "e")
	if _, err := old.Release(bg, Finished{Outcome: OutcomeDone}, nil); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release by taken-over holder: %v, want ErrNotHeld", err)
	}
	if _, err := s.Acquire(bg, req("e", time.Minute)); !errors.Is(err, ErrBusy) {
		t.Fatalf("new holder's lease was touched: acquire got %v", err)
	}
	if cur.Fence <= old.Fence {
		t.Fatalf("fence %d after %d", cur.Fence, old.Fence)
	}
	mustRelease(t, cur)
	if _, err := cur.Release(bg, Finished{}, nil); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("double release: %v", err)
	}
}

// thenRec records a ReleaseThen's answer, with the lease's cause then.
type thenRec struct {
	l  *Lease
	ch chan thenAnswer
}

type thenAnswer struct {
	rel   Released
	err   error
	cause error // the lease's, when the answer came
}

func newThenRec(l *Lease) *thenRec { return &thenRec{l: l, ch: make(chan thenAnswer, 2)} }

func (r *thenRec) AfterRelease(rel Released, err error) {
	r.ch <- thenAnswer{rel, err, context.Cause(r.l.Context())}
}

func (r *thenRec) answer(t *testing.T) thenAnswer {
	t.Helper()
	select {
	case a := <-r.ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer for the release of %s", r.l.Entity)
		return thenAnswer{}
	}
}

// testReleaseThen: ReleaseThen answers once, what Release would have, after
// the lease was dropped; a lease taken over is left alone.
func testReleaseThen(t *testing.T, k kit) {
	s := k.client(Options{})
	old, cur := takeOver(t, s, "gone")
	done := mustAcquire(t, s, req("done", time.Minute))
	next := mustAcquire(t, s, req("next", time.Minute))
	recs := []*thenRec{newThenRec(old), newThenRec(done), newThenRec(next)}
	fin := Finished{Outcome: OutcomeDone, Started: time.Now(), Ended: time.Now()}
	old.ReleaseThen(fin, nil, recs[0])
	done.ReleaseThen(fin, nil, recs[1])
	next.ReleaseThen(fin, &Next{Reason: ReasonReschedule, Delay: time.Hour, Attempt: 1}, recs[2])
	if a := recs[0].answer(t); !errors.Is(a.err, ErrNotHeld) {
		t.Fatalf("taken-over holder's ReleaseThen answered %v, want ErrNotHeld", a.err)
	}
	if _, err := s.Acquire(bg, req("gone", time.Minute)); !errors.Is(err, ErrBusy) {
		t.Fatalf("the new holder's lease was touched: acquire got %v", err)
	}
	for _, r := range recs[1:] {
		a := r.answer(t)
		if a.err != nil || !errors.Is(a.cause, ErrReleased) {
			t.Fatalf("%s: answered %v with the lease's cause %v, want nil after ErrReleased", r.l.Entity, a.err, a.cause)
		}
		mustRelease(t, mustAcquire(t, s, req(r.l.Entity, time.Minute))) // free again
	}
	if d := dues(t, s); len(d) != 1 || d[0].Entity != "next" || d[0].Reason != ReasonReschedule {
		t.Fatalf("due entries %+v, want next's reschedule", d)
	}
	// Released already: answered at once, and only once.
	done.ReleaseThen(fin, nil, recs[1])
	if a := recs[1].answer(t); !errors.Is(a.err, ErrNotHeld) {
		t.Fatalf("second ReleaseThen answered %v, want ErrNotHeld", a.err)
	}
	for _, r := range recs {
		select {
		case a := <-r.ch:
			t.Fatalf("%s answered twice: %+v", r.l.Entity, a)
		default:
		}
	}
	mustRelease(t, cur)
}

func testExpiry(t *testing.T, k kit) {
	s := k.client(Options{})
	const ttl = 400 * time.Millisecond
	l := mustAcquire(t, s, req("e", ttl))
	l.stopRenewing()
	if got, want := l.TrustedUntil(), l.Acquired.Add(ttl-Margin(ttl)); !got.Equal(want) {
		t.Fatalf("trusted until %v, want %v", got, want)
	}
	if err := waitCause(t, l, 5*time.Second); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("cause %v, want ErrUntrusted", err)
	}
	if now := time.Now(); now.After(l.Acquired.Add(ttl)) {
		t.Fatalf("context cancelled %v after the lease could have expired", now.Sub(l.Acquired.Add(ttl)))
	}
	redistest.WaitFor(t, 5*time.Second, "expired lease to be granted again", func() bool {
		l2, err := s.Acquire(bg, req("e", ttl))
		if err == nil {
			mustRelease(t, l2)
		}
		return err == nil
	})
}

// jumpClock is the system clock plus an offset a test can move, as a process
// frozen with SIGSTOP sees time jump when it wakes.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func testCheck(t *testing.T, k kit) {
	clock := &jumpClock{}
	s := k.client(Options{Clock: clock})
	l := mustAcquire(t, s, req("e", time.Minute))
	if err := l.Check(); err != nil {
		t.Fatalf("fresh lease: %v", err)
	}
	// The process wakes up two minutes later: its trust timer has not fired
	// yet (it runs on the real clock), but Check must refuse there and then,
	// and cancel the context with it.
	clock.offset.Store(int64(2 * time.Minute))
	if err := l.Check(); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("Check past the trust window: %v, want ErrUntrusted", err)
	}
	if err := context.Cause(l.Context()); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("context after Check: %v, want cancelled with ErrUntrusted", err)
	}
	clock.offset.Store(0)
	l2 := mustAcquire(t, s, req("f", time.Minute))
	mustRelease(t, l2)
	if err := l2.Check(); !errors.Is(err, ErrReleased) {
		t.Fatalf("Check after release: %v, want ErrReleased", err)
	}
}

// The leases of one batch share a trust timer, yet each lives on its own: one
// not renewed is dropped in time, one released leaves, and one renewed
// outlives the batch's first window.
func testBatchTrust(t *testing.T, k kit) {
	s := k.client(Options{})
	const ttl = 300 * time.Millisecond
	res := s.AcquireBatch(bg, []Request{req("stale", ttl), req("released", ttl), req("renewed", ttl)})
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	stale, released, renewed := res[0].Lease, res[1].Lease, res[2].Lease
	stale.stopRenewing()
	mustRelease(t, released)
	if err := waitCause(t, stale, 5*time.Second); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("cause %v, want ErrUntrusted", err)
	}
	if now := time.Now(); now.After(stale.Acquired.Add(ttl)) {
		t.Fatalf("context cancelled %v after the lease could have expired", now.Sub(stale.Acquired.Add(ttl)))
	}
	redistest.WaitFor(t, 10*time.Second, "renewals", func() bool {
		return renewed.TrustedUntil().After(renewed.Acquired.Add(3 * ttl))
	})
	if err := context.Cause(renewed.Context()); err != nil {
		t.Fatalf("renewed lease cancelled: %v", err)
	}
	if err := context.Cause(released.Context()); !errors.Is(err, ErrReleased) {
		t.Fatalf("released lease: cause %v", err)
	}
	mustRelease(t, renewed)
}

// closingClock closes its store, once armed, from inside the acquire that
// reads it: the grant arrives after Close has dropped every lease.
type closingClock struct {
	s     *Store
	armed atomic.Bool
}

func (c *closingClock) Now() time.Time {
	if c.armed.CompareAndSwap(true, false) {
		go c.s.Close()
		for {
			c.s.mu.Lock()
			closed := c.s.closed
			c.s.mu.Unlock()
			if closed {
				break
			}
			runtime.Gosched()
		}
	}
	return time.Now()
}

func testGrantedWhileClosing(t *testing.T, k kit) {
	clock := &closingClock{}
	s := k.client(Options{Clock: clock})
	clock.s = s
	// The keeper reads the clock too: arm it once the keeper sleeps.
	redistest.WaitFor(t, 5*time.Second, "keeper asleep", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.wakeAt.IsZero()
	})
	clock.armed.Store(true)
	l, err := s.Acquire(bg, req("e", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := context.Cause(l.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("lease granted while closing: cause %v, want ErrClosed", err)
	}
}

func testRenewal(t *testing.T, k kit) {
	s := k.client(Options{})
	// The shortest TTL a holder can keep: a renewal round has 700ms before
	// the trust window ends. With 300ms (140ms for a round, a WAIT in it on
	// the replicated pair) this test timed out once in CI, while the fault
	// suite loaded the machine.
	const ttl = MinTTL
	l := mustAcquire(t, s, req("e", ttl))
	first := l.TrustedUntil()
	// Several renewals: the trust window moves past three TTLs from the start.
	redistest.WaitFor(t, 15*time.Second, "renewals", func() bool {
		if err := context.Cause(l.Context()); err != nil {
			t.Fatalf("lease lost before three TTLs of renewals: %v", err)
		}
		return l.TrustedUntil().After(l.Acquired.Add(3 * ttl))
	})
	if l.Context().Err() != nil {
		t.Fatalf("renewed lease cancelled: %v", context.Cause(l.Context()))
	}
	if !l.TrustedUntil().After(first) {
		t.Fatal("trust window did not move")
	}
	if _, err := s.Acquire(bg, req("e", ttl)); !errors.Is(err, ErrBusy) {
		t.Fatalf("renewed lease acquired by another: %v", err)
	}
	mustRelease(t, l)
	if err := context.Cause(l.Context()); !errors.Is(err, ErrReleased) {
		t.Fatalf("cause after release %v", err)
	}
}

func testUnlock(t *testing.T, k kit) {
	s := k.client(Options{Replica: "A"})
	op := k.client(Options{Replica: "op"})
	l := mustAcquire(t, s, req("e", 600*time.Millisecond))
	h, err := op.Unlock(bg, "t", "e", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if h.Fence != l.Fence {
		t.Fatalf("unlocked %+v, held fence %d", h, l.Fence)
	}
	if err := waitCause(t, l, 5*time.Second); !errors.Is(err, ErrLost) {
		t.Fatalf("cause %v, want ErrLost", err)
	}
	if _, err := op.Unlock(bg, "t", "e", "alice"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second unlock: %v", err)
	}
	// The unlock is on record, with who did it; the stale holder's release
	// does not overwrite it.
	if _, err := l.Release(bg, Finished{Outcome: OutcomeDone}, nil); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("stale holder's release: %v", err)
	}
	st, err := op.Entity(bg, "t", "e")
	if err != nil {
		t.Fatal(err)
	}
	expect.NotNil(t, "record of the unlock", st.Last)
	expect.Equal(t, "unlock record's outcome", st.Last.Outcome, OutcomeUnlocked)
	expect.Equal(t, "unlock record's replica (who unlocked)", st.Last.Replica, "alice")
	expect.Equal(t, "unlock record's fence", st.Last.Fence, l.Fence)
}

// An entity asked for twice in one batch (a source that lists an id twice)
// is granted once.
func testDuplicateInBatch(t *testing.T, k kit) {
	s := k.client(Options{})
	res := s.AcquireBatch(bg, []Request{req("d", time.Minute), req("x", time.Minute), req("d", time.Minute)})
	expect.Equal(t, "first ask for d", res[0].Err, nil)
	expect.Equal(t, "ask for x", res[1].Err, nil)
	if !errors.Is(res[2].Err, ErrBusy) {
		t.Fatalf("second ask for d in the batch: %v, want busy", res[2].Err)
	}
	if res[2].Err.(*BusyError).Fence != res[0].Lease.Fence {
		t.Fatalf("duplicate busy with %+v, want the first grant's fence %d", res[2].Err, res[0].Lease.Fence)
	}
	mustRelease(t, res[0].Lease)
	mustRelease(t, res[1].Lease)
}

// What the store keeps about an entity is forgotten StateTTL after it was
// last granted or released, by the store itself; a held lease never is.
func testRetention(t *testing.T, k kit) {
	const stateTTL = 300 * time.Millisecond
	s := k.client(Options{StateTTL: stateTTL})
	mustRelease(t, mustAcquire(t, s, req("old", time.Minute)))
	held := mustAcquire(t, s, req("held", 3*time.Second))
	if st, err := s.Entity(bg, "t", "old"); err != nil || st.Last == nil {
		t.Fatalf("fresh record missing: %+v %v", st, err)
	}
	redistest.WaitFor(t, 10*time.Second, "the old record to be swept", func() bool {
		st, err := s.Entity(bg, "t", "old")
		return err == nil && st.Last == nil
	})
	if held.Context().Err() != nil {
		t.Fatalf("held lease lost: %v", context.Cause(held.Context()))
	}
	if _, err := s.Acquire(bg, req("held", time.Minute)); !errors.Is(err, ErrBusy) {
		t.Fatalf("held lease swept: acquire gave %v", err)
	}
	mustRelease(t, held)
}

func testFences(t *testing.T, k kit) {
	s := k.client(Options{StateTTL: 200 * time.Millisecond})
	var last int64
	check := func(l *Lease) {
		t.Helper()
		if l.Fence <= last {
			t.Fatalf("fence %d after %d", l.Fence, last)
		}
		last = l.Fence
	}
	for range 5 {
		l := mustAcquire(t, s, req("e", time.Minute))
		check(l)
		mustRelease(t, l)
	}
	// After the lease expired.
	l := mustAcquire(t, s, req("e", 200*time.Millisecond))
	check(l)
	l.stopRenewing()
	redistest.WaitFor(t, 5*time.Second, "expiry", func() bool {
		l2, err := s.Acquire(bg, req("e", time.Minute))
		if err == nil {
			check(l2)
			mustRelease(t, l2)
		}
		return err == nil
	})
	// After the state expired (StateTTL 200ms) and was swept: the entity's
	// last run is forgotten, and a fresh grant still gets a higher fence.
	redistest.WaitFor(t, 5*time.Second, "state swept", func() bool {
		if err := s.Sweep(bg); err != nil {
			t.Fatal(err)
		}
		st, err := s.Entity(bg, "t", "e")
		return err == nil && st.Last == nil
	})
	l = mustAcquire(t, s, req("e", time.Minute))
	check(l)
	mustRelease(t, l)
}

func testOncePerTick(t *testing.T, k kit) {
	a := k.client(Options{Replica: "A"})
	b := k.client(Options{Replica: "B"})
	T := time.Date(2026, 1, 22, 10, 15, 0, 0, time.UTC)
	tick := func(s *Store, e string, at time.Time) (*Lease, error) {
		return s.Acquire(bg, Request{Task: "t", Entity: e, TTL: time.Minute, Reason: ReasonTick, Tick: at})
	}
	l, err := tick(a, "e", T)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Tick.Equal(T) {
		t.Fatalf("lease tick %v", l.Tick)
	}
	mustRelease(t, l)
	for _, c := range []struct {
		name string
		at   time.Time
	}{{"same tick, other replica", T}, {"late older tick", T.Add(-15 * time.Minute)}} {
		_, err := tick(b, "e", c.at)
		var ar *AlreadyRanError
		if !errors.As(err, &ar) || !ar.LastTick.Equal(T) {
			t.Fatalf("%s: got %v, want already ran at %v", c.name, err, T)
		}
	}
	// Other reasons skip the tick check.
	mustRelease(t, mustAcquire(t, b, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonReschedule}))
	// Other entities have their own record.
	l, err = tick(b, "f", T)
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, l)
	// A busy entity does not consume the tick.
	hold := mustAcquire(t, a, req("e", time.Minute))
	if _, err := tick(b, "e", T.Add(15*time.Minute)); !errors.Is(err, ErrBusy) {
		t.Fatalf("tick on busy entity: %v", err)
	}
	mustRelease(t, hold)
	l, err = tick(b, "e", T.Add(15*time.Minute))
	if err != nil {
		t.Fatalf("next tick after busy: %v", err)
	}
	mustRelease(t, l)
}

func dues(t *testing.T, s *Store) []Due {
	t.Helper()
	var ds []Due
	if err := s.DueEntries(bg, "", func(d Due) error { ds = append(ds, d); return nil }); err != nil {
		t.Fatal(err)
	}
	return ds
}

func testFollowUp(t *testing.T, k kit) {
	a := k.client(Options{Replica: "A"})
	b := k.client(Options{Replica: "B"})
	l := mustAcquire(t, a, req("e", time.Minute))
	for range 3 { // several requests, one follow-up
		r := req("e", time.Minute)
		r.Queue = true
		_, err := b.Acquire(bg, r)
		var be *BusyError
		if !errors.As(err, &be) || !be.Queued {
			t.Fatalf("queued acquire: %v", err)
		}
	}
	if ds := dues(t, a); len(ds) != 0 {
		t.Fatalf("follow-up due while the holder runs: %+v", ds)
	}
	if r := mustRelease(t, l); !r.FollowUp {
		t.Fatal("release did not report the follow-up")
	}
	ds, err := b.TakeDue(bg, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Reason != ReasonQueued || ds[0].Entity != "e" {
		t.Fatalf("due after release: %+v", ds)
	}
	f := mustAcquire(t, b, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonQueued, From: &ds[0]})
	if r := mustRelease(t, f); r.FollowUp {
		t.Fatal("follow-up of the follow-up")
	}
	if ds := dues(t, a); len(ds) != 0 {
		t.Fatalf("due entries left: %+v", ds)
	}
}

// testFollowUpTick: a queued run carries the tick that queued it, the
// latest when several folded into one (not its holder's, which would have
// every queued run of a long job redo one old tick); that tick counts as
// run, so a late replica's request for it is not queued again; and a
// reschedule the follow-up folds into carries it too.
func testFollowUpTick(t *testing.T, k kit) {
	a := k.client(Options{Replica: "A"})
	b := k.client(Options{Replica: "B"})
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := func(n int) Request {
		return Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonTick, Tick: T.Add(time.Duration(n) * time.Minute), Queue: true}
	}
	l := mustAcquire(t, a, tick(0))
	for _, n := range []int{1, 2} {
		if _, err := b.Acquire(bg, tick(n)); !errors.Is(err, ErrBusy) {
			t.Fatalf("tick %d while the holder runs: %v, want busy", n, err)
		}
	}
	if _, err := b.Acquire(bg, tick(1)); !errors.Is(err, ErrAlreadyRan) {
		t.Fatalf("a late request for a tick already queued: %v, want already ran", err)
	}
	mustRelease(t, l)
	ds := dues(t, a)
	if len(ds) != 1 || ds[0].Reason != ReasonQueued || !ds[0].Tick.Equal(T.Add(2*time.Minute)) {
		t.Fatalf("follow-up %+v, want one queued run for the tick %v", ds, T.Add(2*time.Minute))
	}
	taken, err := b.TakeDue(bg, 10, time.Minute)
	if err != nil || len(taken) != 1 {
		t.Fatalf("take: %v %+v", err, taken)
	}
	f := mustAcquire(t, b, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonQueued, From: &taken[0]})
	if !f.Tick.Equal(T.Add(2 * time.Minute)) {
		t.Fatalf("queued run's tick %v, want %v", f.Tick, T.Add(2*time.Minute))
	}
	// A reschedule of the queued run, with tick 3 queued meanwhile: the
	// next run stands for tick 3 too, and carries it.
	if _, err := a.Acquire(bg, tick(3)); !errors.Is(err, ErrBusy) {
		t.Fatalf("tick 3: %v, want busy", err)
	}
	if _, err := f.Release(bg, Finished{Outcome: OutcomeReschedule}, &Next{Reason: ReasonReschedule, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, a); len(ds) != 1 || ds[0].Reason != ReasonReschedule || !ds[0].Tick.Equal(T.Add(3*time.Minute)) {
		t.Fatalf("next run %+v, want one reschedule for the tick %v", ds, T.Add(3*time.Minute))
	}
}

func testReleaseNext(t *testing.T, k kit) {
	s := k.client(Options{})
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := mustAcquire(t, s, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonTick, Tick: T})
	if _, err := l.Release(bg, Finished{Outcome: "reschedule"}, &Next{Reason: ReasonReschedule, Delay: time.Hour, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	ds := dues(t, s)
	if len(ds) != 1 {
		t.Fatalf("%d due entries, want 1: %+v", len(ds), ds)
	}
	expect.Equal(t, "due reason", ds[0].Reason, ReasonReschedule)
	expect.Equal(t, "due attempt", ds[0].Attempt, 1)
	expect.True(t, "the due entry keeps the run's tick", ds[0].Tick.Equal(T))
	if d := time.Until(ds[0].At); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("due in %v, want 1h", d)
	}
	if got, _ := s.TakeDue(bg, 10, time.Minute); len(got) != 0 {
		t.Fatalf("taken before due: %+v", got)
	}
	// An earlier request replaces nothing: the earliest pending one is kept.
	if err := s.Enqueue(bg, Due{Task: "t", Entity: "e", Reason: ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	got, _ := s.TakeDue(bg, 10, time.Minute)
	if len(got) != 1 || got[0].Reason != ReasonTrigger {
		t.Fatalf("taken %+v", got)
	}
	if err := s.Ack(bg, got[0]); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, s); len(ds) != 0 {
		t.Fatalf("left %+v", ds)
	}
}

// A run that carries out a due entry runs for the entry's tick: what it
// enqueues at release (Next, or a follow-up) carries that tick on.
func testChainTick(t *testing.T, k kit) {
	s := k.client(Options{})
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	take := func() Due {
		t.Helper()
		got, err := s.TakeDue(bg, 10, time.Minute)
		if err != nil || len(got) != 1 || !got[0].Tick.Equal(T) {
			t.Fatalf("taken %+v, %v: want one entry for tick %v", got, err, T)
		}
		return got[0]
	}
	if err := s.Enqueue(bg, Due{Task: "t", Entity: "e", Reason: ReasonRetry, Attempt: 1, Tick: T}, 0); err != nil {
		t.Fatal(err)
	}
	d := take()
	l := mustAcquire(t, s, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: d.Reason, From: &d})
	if _, err := l.Release(bg, Finished{Outcome: "failed"}, &Next{Reason: ReasonRetry, Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	d = take()
	l = mustAcquire(t, s, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: d.Reason, From: &d})
	if _, err := s.Acquire(bg, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonTrigger, Queue: true}); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire while held: %v", err)
	}
	if r := mustRelease(t, l); !r.FollowUp {
		t.Fatal("no follow-up")
	}
	if d = take(); d.Reason != ReasonQueued {
		t.Fatalf("follow-up %+v", d)
	}
}

func testDueTakenOnce(t *testing.T, k kit) {
	a := k.client(Options{Replica: "A"})
	b := k.client(Options{Replica: "B"})
	const n = 300
	for i := range n {
		if err := a.Enqueue(bg, Due{Task: "t", Entity: strconv.Itoa(i), Reason: ReasonTrigger}, 0); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ds, err := s.TakeDue(bg, 7, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, d := range ds {
					mu.Lock()
					seen[d.Entity]++
					mu.Unlock()
					if err := s.Ack(bg, d); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d entries taken", len(seen), n)
	}
	for e, c := range seen {
		if c != 1 {
			t.Fatalf("entry %s taken %d times", e, c)
		}
	}
}

func testVisibility(t *testing.T, k kit) {
	a := k.client(Options{Replica: "A"})
	b := k.client(Options{Replica: "B"})
	if err := a.Enqueue(bg, Due{Task: "t", Entity: "e", Reason: ReasonRetry, Attempt: 2}, 0); err != nil {
		t.Fatal(err)
	}
	first, _ := a.TakeDue(bg, 10, 300*time.Millisecond)
	if len(first) != 1 {
		t.Fatalf("taken %+v", first)
	}
	if again, _ := b.TakeDue(bg, 10, time.Minute); len(again) != 0 {
		t.Fatalf("taken twice within visibility: %+v", again)
	}
	// A dies: the entry comes back to B after the visibility timeout.
	var second []Due
	redistest.WaitFor(t, 5*time.Second, "entry back after visibility", func() bool {
		second, _ = b.TakeDue(bg, 10, time.Minute)
		return len(second) == 1
	})
	if second[0].Attempt != 2 || second[0].Reason != ReasonRetry {
		t.Fatalf("entry changed: %+v", second[0])
	}
	// A's late ack must not remove B's claim.
	if err := a.Ack(bg, first[0]); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, a); len(ds) != 1 {
		t.Fatalf("stale ack removed the entry: %+v", ds)
	}
	if err := b.Ack(bg, second[0]); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, a); len(ds) != 0 {
		t.Fatalf("ack left %+v", ds)
	}
}

func testBusyDue(t *testing.T, k kit) {
	s := k.client(Options{})
	hold := mustAcquire(t, s, req("e", time.Minute))
	if err := s.Enqueue(bg, Due{Task: "t", Entity: "e", Reason: ReasonReschedule}, 0); err != nil {
		t.Fatal(err)
	}
	ds, _ := s.TakeDue(bg, 10, time.Minute)
	if len(ds) != 1 {
		t.Fatalf("taken %+v", ds)
	}
	_, err := s.Acquire(bg, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonReschedule, Queue: true, From: &ds[0]})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire: %v", err)
	}
	if left := dues(t, s); len(left) != 0 {
		t.Fatalf("busy due entry not turned into a follow-up: %+v", left)
	}
	if r := mustRelease(t, hold); !r.FollowUp {
		t.Fatal("no follow-up after the holder")
	}
	if left := dues(t, s); len(left) != 1 || left[0].Reason != ReasonQueued {
		t.Fatalf("after release: %+v", left)
	}
}

func testBatch(t *testing.T, k kit) {
	a := k.client(Options{Replica: "A"})
	b := k.client(Options{Replica: "B"})
	const n = 700 // more than one round trip's worth
	T := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Task: "t", Entity: fmt.Sprint("e", i), TTL: time.Minute, Reason: ReasonTick, Tick: T}
	}
	reqs[5].TTL = 0 // one bad request does not spoil the batch
	res := a.AcquireBatch(bg, reqs)
	for i, r := range res {
		if (i == 5) != (r.Err != nil) {
			t.Fatalf("entity %d: %v", i, r.Err)
		}
	}
	// The same tick on another replica: already ran; another reason: busy.
	for i, r := range b.AcquireBatch(bg, reqs) {
		if i != 5 && !errors.Is(r.Err, ErrAlreadyRan) {
			t.Fatalf("same tick on B, entity %d: %v", i, r.Err)
		}
	}
	triggers := make([]Request, n)
	for i, r := range reqs {
		r.Reason = ReasonTrigger
		triggers[i] = r
	}
	for i, r := range b.AcquireBatch(bg, triggers) {
		if i != 5 && !errors.Is(r.Err, ErrBusy) {
			t.Fatalf("trigger on B, entity %d: %v", i, r.Err)
		}
	}
	for i, r := range res {
		if i != 5 {
			mustRelease(t, r.Lease)
		}
	}
	for i, r := range b.AcquireBatch(bg, reqs) {
		if i != 5 && !errors.Is(r.Err, ErrAlreadyRan) {
			t.Fatalf("after release entity %d: %v", i, r.Err)
		}
	}
	next := make([]Request, n)
	for i, r := range reqs {
		r.Tick = T.Add(time.Second)
		next[i] = r
	}
	for i, r := range b.AcquireBatch(bg, next) {
		if i != 5 {
			if r.Err != nil {
				t.Fatalf("next tick entity %d: %v", i, r.Err)
			}
			mustRelease(t, r.Lease)
		}
	}
}

func testEarly(t *testing.T, k kit) {
	s := k.client(Options{})
	tick := func(at time.Time) error {
		l, err := s.Acquire(bg, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonTick, Tick: at})
		if err == nil {
			mustRelease(t, l)
		}
		return err
	}
	// A replica whose clock runs 5s ahead asks for a tick 5s early.
	err := tick(time.Now().Add(5 * time.Second))
	var ee *EarlyError
	if !errors.As(err, &ee) || !errors.Is(err, ErrEarly) {
		t.Fatalf("early tick: %v, want an *EarlyError", err)
	}
	expect.True(t, "the wait is about the 5s the clock is ahead", ee.Wait > 4*time.Second && ee.Wait < 6*time.Second)
	// Nothing was recorded: the tick now is not refused as already ran.
	if err := tick(time.Now()); err != nil {
		t.Fatalf("tick due now: %v", err)
	}
	// Within the tolerance is fine.
	if err := tick(time.Now().Add(EarlyTolerance / 2)); err != nil {
		t.Fatalf("tick within tolerance: %v", err)
	}
	// Other reasons carry no tick to check.
	mustRelease(t, mustAcquire(t, s, Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: ReasonRetry, Tick: time.Now().Add(time.Hour)}))
}

var hostileIDs = []string{
	"", " ", "a b", "a:b", "{x}", "}{", "a}:{b", "*", "?", "[a-z]", "\\", "%41", "A",
	"line\nbreak", "nul\x00byte", "ünïcødé 🎉", "$(touch /tmp/x)", "a b;$(touch /tmp/x)",
	string(make([]byte, 10*1024)), fmt.Sprintf("%010240d", 7),
}

func testHostileIDs(t *testing.T, k kit) {
	s := k.client(Options{})
	var ls []*Lease
	for _, id := range hostileIDs {
		ls = append(ls, mustAcquire(t, s, Request{Task: "we:ird {task}", Entity: id, TTL: time.Minute, Reason: ReasonTrigger}))
	}
	got := map[string]bool{}
	if err := s.Leases(bg, "we:ird {task}", func(h Held) error { got[h.Entity] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, id := range hostileIDs {
		if !got[id] {
			t.Errorf("lease of %q not listed", id)
		}
		if _, err := s.Acquire(bg, Request{Task: "we:ird {task}", Entity: id, TTL: time.Minute, Reason: ReasonTrigger}); !errors.Is(err, ErrBusy) {
			t.Errorf("%q: %v", id, err)
		}
	}
	if len(got) != len(hostileIDs) {
		t.Errorf("%d leases listed, want %d", len(got), len(hostileIDs))
	}
	for _, l := range ls {
		mustRelease(t, l)
	}
}

func testEntityState(t *testing.T, k kit) {
	s := k.client(Options{Replica: "A"})
	st, err := s.Entity(bg, "t", "e")
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "unknown entity: held", st.Held, nil)
	expect.Equal(t, "unknown entity: last run", st.Last, nil)
	expect.Equal(t, "unknown entity: pending", st.Pending, nil)
	l := mustAcquire(t, s, req("e", time.Minute))
	st, _ = s.Entity(bg, "t", "e")
	expect.NotNil(t, "held lease", st.Held)
	expect.Equal(t, "held lease's fence", st.Held.Fence, l.Fence)
	expect.Equal(t, "held lease's holder", st.Held.Holder, "A")
	if _, err := l.Release(bg, Finished{Outcome: OutcomeDone}, &Next{Reason: ReasonReschedule, Delay: time.Hour, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Entity(bg, "t", "e")
	expect.Equal(t, "held after release", st.Held, nil)
	expect.NotNil(t, "last run after release", st.Last)
	expect.Equal(t, "last run's outcome", st.Last.Outcome, OutcomeDone)
	expect.Equal(t, "last run's fence", st.Last.Fence, l.Fence)
	expect.NotNil(t, "pending after a release with Next", st.Pending)
	expect.Equal(t, "pending reason", st.Pending.Reason, ReasonReschedule)
	expect.Equal(t, "pending attempt", st.Pending.Attempt, 1)
}

func testStatus(t *testing.T, k kit) {
	s := k.client(Options{Replica: "A"})
	l := mustAcquire(t, s, req("held", time.Minute))
	done := mustAcquire(t, s, Request{Task: "other", Entity: "x", TTL: time.Minute, Reason: ReasonTrigger})
	if _, err := done.Release(bg, Finished{Outcome: "failed", Started: time.UnixMilli(1000), Ended: time.UnixMilli(3000)}, nil); err != nil {
		t.Fatal(err)
	}
	var hs []Held
	s.Leases(bg, "t", func(h Held) error { hs = append(hs, h); return nil }) //nolint:errcheck
	if len(hs) != 1 || hs[0].Entity != "held" || hs[0].Fence != l.Fence || hs[0].TTL <= 0 || hs[0].TTL > time.Minute {
		t.Fatalf("leases of t: %+v", hs)
	}
	var rs []LastRun
	s.LastRuns(bg, "other", func(r LastRun) error { rs = append(rs, r); return nil }) //nolint:errcheck
	if len(rs) != 1 || rs[0].Outcome != "failed" || rs[0].Fence != done.Fence || rs[0].Ended.Sub(rs[0].Started) != 2*time.Second {
		t.Fatalf("last runs: %+v", rs)
	}
	var all []Held
	s.Leases(bg, "", func(h Held) error { all = append(all, h); return nil }) //nolint:errcheck
	if len(all) != 1 {
		t.Fatalf("all leases: %+v", all)
	}
	mustRelease(t, l)
}

func testCloseReportsHeld(t *testing.T, k kit) {
	s := k.client(Options{})
	mustRelease(t, mustAcquire(t, s, req("released", time.Minute)))
	held := mustAcquire(t, s, req("held", time.Minute))
	err := s.Close()
	if !errors.Is(err, ErrStillHeld) {
		t.Fatalf("Close with a lease not released: %v, want ErrStillHeld", err)
	}
	if want := "1 leases"; !strings.Contains(err.Error(), want) {
		t.Errorf("Close's error %q does not say %q", err, want)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, ErrClosed) {
		t.Errorf("lease held at Close: cause %v, want ErrClosed", cause)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
}

// Each trigger's request id is answered by exactly the run it causes,
// whatever that run's reason, or by why none ran; never by another run.
func testRequests(t *testing.T, k kit) {
	s := k.client(Options{Replica: "A"})
	other := k.client(Options{Replica: "B"})
	const r1, r2 = "req-1", "req-2"
	trigger := func(entity string, ids ...string) {
		t.Helper()
		if err := s.Enqueue(bg, Due{Task: "t", Entity: entity, Reason: ReasonTrigger, Requests: ids}, 0); err != nil {
			t.Fatal(err)
		}
	}
	take := func(entity string) Due {
		t.Helper()
		ds, err := s.TakeDue(bg, 10, time.Minute)
		if err != nil || len(ds) != 1 || ds[0].Entity != entity {
			t.Fatalf("taken %+v, %v: want one entry for %s", ds, err, entity)
		}
		return ds[0]
	}
	run := func(d Due, queue bool) (*Lease, error) {
		return s.Acquire(bg, Request{Task: "t", Entity: d.Entity, TTL: time.Minute, Reason: d.Reason, Queue: queue, From: &d})
	}
	end := func(l *Lease, o Outcome, next *Next) {
		t.Helper()
		if _, err := l.Release(bg, Finished{Outcome: o}, next); err != nil {
			t.Fatal(err)
		}
	}
	answered := func(id string) map[string]Outcome {
		t.Helper()
		m, err := other.Answers(bg, "t", id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// a: a plain trigger, its run done.
	trigger("a", r1)
	l, err := run(take("a"), false)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "the run carries the request", strings.Join(l.Requests, ","), r1)
	end(l, OutcomeDone, nil)

	// b: busy with on_busy queue: the holder's own run answers nothing;
	// the follow-up it leaves answers the trigger.
	hold := mustAcquire(t, other, req("b", time.Minute))
	trigger("b", r1)
	if _, err := run(take("b"), true); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire b: %v", err)
	}
	end(hold, OutcomeDone, nil)
	if _, ok := answered(r1)["b"]; ok {
		t.Fatal("the holder's run answered the trigger it was busy for")
	}
	fu := take("b")
	expect.Equal(t, "follow-up reason", fu.Reason, ReasonQueued)
	l, err = run(fu, true)
	if err != nil {
		t.Fatal(err)
	}
	end(l, OutcomeFailed, nil)

	// c: busy with on_busy skip.
	hold = mustAcquire(t, other, req("c", time.Minute))
	trigger("c", r1)
	if _, err := run(take("c"), false); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire c: %v", err)
	}
	end(hold, OutcomeDone, nil)

	// d: the trigger joins a pending reschedule; that run answers it.
	if err := s.Enqueue(bg, Due{Task: "t", Entity: "d", Reason: ReasonReschedule, Attempt: 1}, 0); err != nil {
		t.Fatal(err)
	}
	trigger("d", r1)
	d := take("d")
	expect.Equal(t, "joined entry's reason", d.Reason, ReasonReschedule)
	if l, err = run(d, true); err != nil {
		t.Fatal(err)
	}
	end(l, OutcomeReschedule, nil)

	// e: handed over (never begun): the next run answers.
	trigger("e", r1)
	if l, err = run(take("e"), false); err != nil {
		t.Fatal(err)
	}
	end(l, OutcomeCanceled, &Next{Reason: ReasonRetry, HandOver: true})
	if _, ok := answered(r1)["e"]; ok {
		t.Fatal("a hand-over answered the trigger")
	}
	if l, err = run(take("e"), false); err != nil {
		t.Fatal(err)
	}
	end(l, OutcomeTimeout, nil)

	// f: dropped (no replica runs the task); g: another request.
	trigger("f", r1)
	if err := s.Ack(bg, take("f")); err != nil {
		t.Fatal(err)
	}
	trigger("g", r2)
	if l, err = run(take("g"), false); err != nil {
		t.Fatal(err)
	}
	end(l, OutcomeDone, nil)

	want := map[string]Outcome{"a": OutcomeDone, "b": OutcomeFailed, "c": AnswerSkipped, "d": OutcomeReschedule,
		"e": OutcomeTimeout, "f": AnswerDropped}
	expect.Equal(t, "answers to the first request", fmt.Sprint(answered(r1)), fmt.Sprint(want))
	expect.Equal(t, "answers to the second request", fmt.Sprint(answered(r2)), fmt.Sprint(map[string]Outcome{"g": OutcomeDone}))
	if err := other.Forget(bg, "t", r1); err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "answers after Forget", len(answered(r1)), 0)
	if err := s.Enqueue(bg, Due{Task: "t", Entity: "x", Requests: []string{"a,b"}}, 0); err == nil {
		t.Fatal("a request id with a comma was accepted")
	}
}
