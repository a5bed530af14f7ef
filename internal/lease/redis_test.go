package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/faultproxy"
	"github.com/tickd/tickd/internal/testkit/redistest"
)

func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

func newRedisStore(t testing.TB, c *redis.Client, opts Options, acks ...driver.ReplicaAcks) *Store {
	s, err := NewRedis(c, "f", opts, acks...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(bg) })
	return s
}

// cancelTimes records when each lease's context is cancelled.
func cancelTimes(ls []*Lease) (wait func(t *testing.T, d time.Duration) []time.Time) {
	times := make([]time.Time, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		context.AfterFunc(l.Context(), func() { times[i] = time.Now(); wg.Done() })
	}
	return func(t *testing.T, d time.Duration) []time.Time {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(d):
			t.Fatalf("not every lease cancelled within %v", d)
		}
		return times
	}
}

// checkStoppedInTime asserts each lease was cancelled before it could have
// expired in Redis: trusted-until plus the margin is the last renewal's send
// time plus the TTL.
func checkStoppedInTime(t *testing.T, ls []*Lease, at []time.Time, want error) {
	t.Helper()
	for i, l := range ls {
		if c := context.Cause(l.Context()); !errors.Is(c, want) {
			t.Errorf("lease %s: cause %v, want %v", l.Entity, c, want)
		}
		expiry := l.TrustedUntil().Add(Margin(l.TTL()))
		if !at[i].Before(expiry) {
			t.Errorf("lease %s cancelled %v after it could have expired", l.Entity, at[i].Sub(expiry))
		}
	}
}

func TestRedisStoppedHoldersStopInTime(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 600 * time.Millisecond
	s := newRedisStore(t, newClient(t, srv.Addr), Options{MaxTTL: ttl})
	s.InitEpoch(bg) //nolint:errcheck
	var ls []*Lease
	for i := range 20 {
		ls = append(ls, mustAcquire(t, s, req(fmt.Sprint(i), ttl)))
	}
	// Let a few renewals happen first.
	expect.WaitFor(t, 5*time.Second, "renewals", func() bool { return ls[19].TrustedUntil().After(ls[19].Acquired.Add(ttl)) })
	wait := cancelTimes(ls)
	srv.Stop()
	at := wait(t, 5*time.Second)
	checkStoppedInTime(t, ls, at, ErrUntrusted)

	// Redis comes back empty: nothing is granted for MaxTTL, then fences
	// still increase although every key is gone.
	srv.Restart()
	var maxFence int64
	for _, l := range ls {
		maxFence = max(maxFence, l.Fence)
	}
	_, err := s.Acquire(bg, req("0", ttl))
	if !errors.Is(err, ErrQuarantine) {
		t.Fatalf("first acquire on an empty Redis: %v, want quarantine", err)
	}
	start := time.Now()
	var l *Lease
	expect.WaitFor(t, 10*time.Second, "quarantine end", func() bool {
		l, err = s.Acquire(bg, req("0", ttl))
		return err == nil
	})
	if waited := time.Since(start); waited < ttl-100*time.Millisecond {
		t.Fatalf("granted %v after the loss was seen, quarantine is %v", waited, ttl)
	}
	if l.Fence <= maxFence {
		t.Fatalf("fence %d after data loss, not above %d", l.Fence, maxFence)
	}
	mustRelease(t, l)
	// A tick from before the loss may have run already: it is not run again.
	_, err = s.Acquire(bg, driver.Request{Task: "t", Entity: "0", TTL: ttl, Reason: driver.ReasonTick, Tick: start.Add(-time.Second)})
	if !errors.Is(err, ErrAlreadyRan) {
		t.Fatalf("tick from before the data loss: %v, want already ran", err)
	}
	l, err = s.Acquire(bg, driver.Request{Task: "t", Entity: "0", TTL: ttl, Reason: driver.ReasonTick, Tick: time.Now()})
	if err != nil {
		t.Fatalf("tick after the loss: %v", err)
	}
	mustRelease(t, l)
}

func TestRedisRestartedEmptyNoSecondHolder(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 900 * time.Millisecond
	a := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "A", MaxTTL: ttl})
	b := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "B", MaxTTL: ttl})
	a.InitEpoch(bg) //nolint:errcheck
	held := mustAcquire(t, a, req("e", ttl))
	wait := cancelTimes([]*Lease{held})
	srv.Restart()
	var got *Lease
	expect.WaitFor(t, 10*time.Second, "a grant after the quarantine", func() bool {
		l, err := b.Acquire(bg, req("e", ttl))
		if err != nil && !errors.Is(err, ErrQuarantine) && !strings.Contains(err.Error(), "connect") {
			t.Logf("acquire: %v", err)
		}
		got = l
		return err == nil
	})
	granted := time.Now()
	at := wait(t, 5*time.Second)
	// The old holder learned of the loss (ErrLost) or failed to renew
	// (ErrUntrusted); either way it stopped before the new grant.
	if c := context.Cause(held.Context()); !errors.Is(c, ErrLost) && !errors.Is(c, ErrUntrusted) {
		t.Fatalf("old holder's cause %v", c)
	}
	if !at[0].Before(granted) {
		t.Fatalf("old holder stopped %v after the new grant", at[0].Sub(granted))
	}
	if !held.TrustedUntil().Before(granted) {
		t.Fatalf("new holder granted while the old one could still trust its lease")
	}
	if got.Fence <= held.Fence {
		t.Fatalf("fence %d after restart, old %d", got.Fence, held.Fence)
	}
	mustRelease(t, got)
}

// TestRedisRestartedFromAnOlderSnapshotNoSecondHolder: Redis killed and
// restarted from a snapshot older than a lease and a tick's run (a Redis
// without an append-only file, after a crash): its keyspace looks intact,
// epoch and all. The restart is a loss all the same: nothing is granted
// before the lease Redis forgot can have expired, and the tick that ran
// after the snapshot does not run again. Without the check, B is granted
// e at once, while A's run goes on, and runs tick T a second time.
func TestRedisRestartedFromAnOlderSnapshotNoSecondHolder(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 900 * time.Millisecond
	a := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "A", MaxTTL: ttl})
	b := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "B", MaxTTL: ttl})
	a.InitEpoch(bg)                                       //nolint:errcheck
	mustRelease(t, mustAcquire(t, a, req("before", ttl))) // the epoch knows this server
	snap := srv.Snapshot()
	T := time.Now().Truncate(time.Second)
	mustRelease(t, mustAcquire(t, a, tickReq("f", ttl, T)))
	held := mustAcquire(t, a, req("e", ttl))
	wait := cancelTimes([]*Lease{held})
	srv.RestartFrom(snap)
	var got *Lease
	expect.WaitFor(t, 10*time.Second, "a grant after the quarantine", func() bool {
		l, err := b.Acquire(bg, req("e", ttl))
		got = l
		return err == nil
	})
	granted := time.Now()
	at := wait(t, 5*time.Second)
	if c := context.Cause(held.Context()); !errors.Is(c, ErrLost) && !errors.Is(c, ErrUntrusted) {
		t.Fatalf("old holder's cause %v", c)
	}
	expect.True(t, fmt.Sprintf("the old holder stopped before the new grant (%v after it)", at[0].Sub(granted)), at[0].Before(granted))
	expect.True(t, "no grant while the old holder could still trust its lease", held.TrustedUntil().Before(granted))
	expect.True(t, "the fence goes on increasing", got.Fence > held.Fence)
	mustRelease(t, got)
	_, err := b.Acquire(bg, tickReq("f", ttl, T))
	expect.True(t, fmt.Sprintf("the tick that ran after the snapshot does not run again: %v", err), errors.Is(err, ErrAlreadyRan))
}

// proxiedPair is two stores on one Redis with leases of ttl: a reaches it
// through a proxy the test can stall, b directly.
func proxiedPair(t *testing.T, ttl time.Duration) (proxy *faultproxy.Proxy, a, b *Store) {
	srv := redistest.Start(t)
	proxy = faultproxy.Start(t, srv.Addr)
	a = newRedisStore(t, newClient(t, proxy.Addr), Options{Replica: "A", MaxTTL: ttl})
	b = newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "B", MaxTTL: ttl})
	a.InitEpoch(bg) //nolint:errcheck
	return proxy, a, b
}

func TestRedisStalledConnection(t *testing.T) {
	const ttl = 600 * time.Millisecond
	proxy, a, b := proxiedPair(t, ttl)
	var ls []*Lease
	for i := range 5 {
		ls = append(ls, mustAcquire(t, a, req(fmt.Sprint(i), ttl)))
	}
	wait := cancelTimes(ls)
	proxy.Stall()
	at := wait(t, 5*time.Second)
	checkStoppedInTime(t, ls, at, ErrUntrusted)
	for i, l := range ls {
		var got *Lease
		expect.WaitFor(t, 5*time.Second, "takeover", func() bool {
			var err error
			got, err = b.Acquire(bg, req(l.Entity, ttl))
			return err == nil
		})
		if !at[i].Before(time.Now()) || got.Fence <= l.Fence {
			t.Fatalf("takeover of %s: fence %d after %d", l.Entity, got.Fence, l.Fence)
		}
		mustRelease(t, got)
	}
	proxy.Resume()
	// Once traffic flows again, A works again.
	expect.WaitFor(t, 5*time.Second, "A recovers", func() bool {
		l, err := a.Acquire(bg, req("again", ttl))
		if err == nil {
			mustRelease(t, l)
		}
		return err == nil
	})
}

func TestRedisBadPrefix(t *testing.T) {
	for _, p := range []string{"", "a{b", "a b", "x}", "*"} {
		if _, err := NewRedis(nil, p, Options{}); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

// Replicas sharing a Redis sweep once per interval between them: however
// many keepers ask, the sweep key lets one through per interval.
func TestRedisOneSweepPerInterval(t *testing.T) {
	srv := redistest.Start(t)
	const stateTTL = 2 * time.Second // a sweep every 200ms
	every := stateTTL / 10
	start := time.Now()
	var swept atomic.Int64
	for _, r := range []string{"A", "B", "C"} {
		s := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: r, StateTTL: stateTTL, OnSweep: func() { swept.Add(1) }})
		if err := s.Start(context.Background()); err != nil { // the keeper sweeps; these stores grant nothing
			t.Fatal(err)
		}
	}
	total := swept.Load
	expect.WaitFor(t, 10*time.Second, "ten sweeps", func() bool { return total() >= 10 })
	n, elapsed := total(), time.Since(start)
	// Claims are at least one interval apart (the key's PX): at most one per
	// interval elapsed, plus the first. Three keepers each sweeping would
	// make about three per interval.
	if limit := int64(elapsed/every) + 1; n > limit {
		t.Fatalf("%d sweeps in %v: more than one per %v (at most %d)", n, elapsed.Round(time.Millisecond), every, limit)
	}
}

func TestCloseAfterEveryReleaseIsClean(t *testing.T) {
	s := NewMemory(Options{})
	mustRelease(t, mustAcquire(t, s, req("e", time.Minute)))
	if err := s.Stop(bg); err != nil {
		t.Fatalf("Close with every lease released: %v, want nil", err)
	}
}

// TestCoverTTLLengthensTheQuarantine: after CoverTTL, a Redis without tickd
// state grants nothing for the longer TTL, so a lease of that TTL that Redis
// forgot cannot be granted again while its holder still trusts it.
func TestCoverTTLLengthensTheQuarantine(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, newClient(t, srv.Addr), Options{MaxTTL: time.Second})
	s.CoverTTL(500 * time.Millisecond) // shorter: no change
	s.CoverTTL(5 * time.Second)
	if got := s.MaxTTL(); got != 5*time.Second {
		t.Fatalf("MaxTTL %v after CoverTTL(5s), want 5s", got)
	}
	_, err := s.Acquire(bg, req("e", time.Second)) // no InitEpoch: a new Redis
	var qe *QuarantineError
	if !errors.As(err, &qe) {
		t.Fatalf("acquire on a Redis without tickd state: %v, want a *QuarantineError", err)
	}
	if qe.Left < 4*time.Second || qe.Left > 5*time.Second {
		t.Fatalf("quarantine of %v, want the 5s covered", qe.Left)
	}
}

// A release that fails (the connection broke, a failover) leaves the lease
// to expire: it is renewed no more, so another holder gets it after the
// TTL. (It used to stay held, renewed for the life of the process.)
func TestFailedReleaseLetsTheLeaseExpire(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	proxy, a, b := proxiedPair(t, ttl)
	l := mustAcquire(t, a, req("x", ttl))
	proxy.Stall()
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	_, err := l.Release(ctx, driver.Finished{Outcome: driver.OutcomeDone}, nil)
	cancel()
	if err == nil {
		t.Fatal("release through a stalled connection succeeded")
	}
	proxy.Cut()
	proxy.Resume() // A's keeper could renew again, if it still held the lease
	expect.WaitFor(t, 3*ttl, "another holder after the TTL", func() bool {
		got, err := b.Acquire(bg, req("x", ttl))
		if err == nil {
			mustRelease(t, got)
		}
		return err == nil
	})
}

// TestChunkTakenOnce: a chunk of a tick's entity stream (Request.Chunk) is
// taken by the first replica to send it, with its leases; another replica
// sending the same chunk for the same tick gets ErrAlreadyRan for all of it
// without its entities being read (here: their records were deleted, so
// read one by one they would be granted again). Requests outside a chunk,
// and a chunk of another id, are still read one by one.
func TestChunkTakenOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	a := newRedisStore(t, c, Options{Replica: "a"})
	b := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "b"})
	a.InitEpoch(bg) //nolint:errcheck
	tick := time.Now().Truncate(time.Second)
	reqs := func(ids []string, chunk string) []driver.Request {
		var rs []driver.Request
		for _, id := range ids {
			rs = append(rs, driver.Request{Task: "t", Entity: id, TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick, Chunk: chunk})
		}
		return rs
	}
	ids := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, prefix+strconv.Itoa(i))
		}
		return out
	}
	batch := append(append(reqs(ids("c", 16), "chunk-1"), reqs(ids("d", 16), "chunk-2")...), reqs(ids("loose", 4), "")...)
	for i, r := range a.AcquireBatch(bg, batch) {
		if r.Err != nil {
			t.Fatalf("a: %s: %v", batch[i].Entity, r.Err)
		}
		mustRelease(t, r.Lease)
	}
	// Forget every record: read entity by entity, all would be granted.
	if err := c.Del(bg, TaskKey("f", "t")).Err(); err != nil {
		t.Fatal(err)
	}
	other := reqs(ids("d", 16), "chunk-3") // the same entities under another chunk id
	res := b.AcquireBatch(bg, append(batch, other...))
	for i, r := range res {
		want := i < 32 // the two chunks a took
		if got := errors.Is(r.Err, ErrAlreadyRan); got != want {
			t.Errorf("b: request %d (%s, chunk %q): %v; want already ran: %v", i, append(batch, other...)[i].Entity, append(batch, other...)[i].Chunk, r.Err, want)
		}
		if r.Err == nil {
			mustRelease(t, r.Lease)
		}
	}
}

// Taken says which of a tick's chunks a fan-out took, and nothing of
// another tick's, or of chunks only ever sent entity by entity.
func TestTaken(t *testing.T) {
	srv := redistest.Start(t)
	a := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "a"})
	a.InitEpoch(bg) //nolint:errcheck
	tick := time.Now().Truncate(time.Second)
	var batch []driver.Request
	for i := range 20 {
		chunk := "chunk-1"
		if i >= 16 {
			chunk = "" // a chunk's entities sent alone take no chunk
		}
		batch = append(batch, driver.Request{Task: "t", Entity: strconv.Itoa(i), TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick, Chunk: chunk})
	}
	for i, r := range a.AcquireBatch(bg, batch) {
		if r.Err != nil {
			t.Fatalf("%s: %v", batch[i].Entity, r.Err)
		}
		mustRelease(t, r.Lease)
	}
	chunks := []string{"chunk-0", "chunk-1", ""}
	got, err := a.Taken(bg, "t", tick, chunks)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, false}; !slices.Equal(got, want) {
		t.Errorf("taken %q: %v, want %v", chunks, got, want)
	}
	got, err = a.Taken(bg, "t", tick.Add(time.Second), chunks)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, false, false}; !slices.Equal(got, want) {
		t.Errorf("another tick: taken %q: %v, want %v", chunks, got, want)
	}
	if got, err = a.Taken(bg, "u", tick, chunks); err != nil || slices.Contains(got, true) {
		t.Errorf("another task: taken %q: %v, %v", chunks, got, err)
	}
}

// TestReplicasAnnounced: a replica's announcement says which process on
// which host with which version runs which tasks, since when; a second
// live process announcing the same replica id is told so (and so is the
// first, at its next announcement); Replicas lists the live ones.
func TestReplicasAnnounced(t *testing.T) {
	srv := redistest.Start(t)
	a1 := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "A", Version: "v1"})
	a2 := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "A", Version: "v1"})
	b := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "B", Version: "v2 <b>"})
	a1.InitEpoch(bg) //nolint:errcheck
	for range 2 {    // announcing again is not a duplicate of itself
		if err := a1.Fleet().Announce(bg, []string{"t1", "t 2"}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Fleet().Announce(bg, []string{"t3"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	// A second process with the same id: its first announcement could be a
	// restart's, finding its predecessor's; from its second on, it is told.
	if err := a2.Fleet().Announce(bg, []string{"t1"}, time.Minute); err != nil {
		t.Fatalf("a process's first announcement: %v, want none (a restart finds its predecessor's)", err)
	}
	var dup *driver.DuplicateReplicaError
	if err := a1.Fleet().Announce(bg, []string{"t1", "t 2"}, time.Minute); !errors.As(err, &dup) || dup.Replica != "A" || dup.Host != hostname() {
		t.Fatalf("the first process, at its next announcement: %v, want a DuplicateReplicaError naming this host", err)
	}
	if err := a2.Fleet().Announce(bg, []string{"t1"}, time.Minute); !errors.Is(err, driver.ErrDuplicateReplica) {
		t.Fatalf("the second process, at its next announcement: %v, want the duplicate said", err)
	}
	// A replica restarted under its id (the old process gone) is not told.
	a3 := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "B", Version: "v2 <b>"})
	for range 2 {
		if err := a3.Fleet().Announce(bg, []string{"t3"}, time.Minute); err != nil {
			t.Fatalf("B restarted: %v, want no duplicate", err)
		}
	}
	rs, err := a1.Fleet().Replicas(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "A" || rs[1].ID != "B" || rs[1].Version != "v2 <b>" || rs[1].Host != hostname() ||
		fmt.Sprint(rs[1].Tasks) != "[t3]" || rs[1].Since.IsZero() || rs[1].Seen.Before(rs[1].Since) {
		t.Fatalf("replicas %+v", rs)
	}
}

// TestSlowRenewalIsWaitedFor: a renewal round slower than a third of the
// TTL, answered within its lease's trust window, renews the lease and is
// no failure. The keeper once gave a round up at TTL/3 and retried after a
// pause: under load (a replica's first tick, 80 processes starting at
// once), the retry came after the window closed and every lease of the
// batch was lost.
func TestSlowRenewalIsWaitedFor(t *testing.T) {
	const ttl = 3 * time.Second
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	var failed, renewed atomic.Int64
	s := newRedisStore(t, c, Options{Replica: "A", MaxTTL: ttl,
		OnRenewError: func(error) { failed.Add(1) }, OnRenew: func() { renewed.Add(1) }}, driver.AcksNever)
	s.InitEpoch(bg) //nolint:errcheck
	l := mustAcquire(t, s, req("e", ttl))
	// The first round goes out at TTL/3 (1s); the link stalls from before
	// it until more than TTL/3 after it (2.2s), before the trust window
	// (0.8 TTL, 2.4s) ends.
	time.Sleep(time.Until(l.Acquired.Add(800 * time.Millisecond))) // the fault's schedule
	proxy.Stall()
	time.Sleep(time.Until(l.Acquired.Add(2200 * time.Millisecond)))
	proxy.Resume()
	expect.WaitFor(t, 2*time.Second, "a renewal round", func() bool { return renewed.Load() > 0 })
	if err := l.Check(); err != nil {
		t.Fatalf("lease after a slow renewal: %v", err)
	}
	expect.Equal(t, "renewal rounds reported failed", failed.Load(), int64(0))
	mustRelease(t, l)
}

// TestLimitLinesExpire: a limit's waiting line, in Redis, expires a day
// after its last use: a limit the config no longer names leaves nothing
// behind for good (its keys lived for ever).
func TestLimitLinesExpire(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	s := newRedisStore(t, c, Options{Replica: "A", MaxTTL: time.Minute})
	s.InitEpoch(bg) //nolint:errcheck
	s.SetLimits([]driver.Limit{{Name: "api", Concurrency: 1}})
	r := driver.Request{Task: "t", TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"api"}}
	r.Entity = "a"
	mustAcquire(t, s, r)
	r.Entity = "b"
	_, err := s.Acquire(bg, r)
	expect.True(t, fmt.Sprintf("b waits for the limit: %v", err), err != nil)
	lines := 0
	for _, k := range c.Keys(bg, "*").Val() {
		if strings.Contains(k, ":q:") || strings.HasSuffix(k, ":seen") || strings.HasSuffix(k, ":since") {
			lines++
			ttl := c.PTTL(bg, k).Val()
			expect.True(t, fmt.Sprintf("%s expires within a day: %v", k, ttl), ttl > 0 && ttl <= 24*time.Hour)
		}
	}
	expect.True(t, "the line's keys were found", lines >= 2)
}
