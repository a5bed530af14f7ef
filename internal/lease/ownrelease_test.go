package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/memdriver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// shutReleases holds every release until open is closed, and counts the
// acquire calls it was sent.
type shutReleases struct {
	driver.Driver
	open chan struct{}
	// answered, when set, is called with each acquire call's number (from
	// 1) once the driver answered it, before the store sees the answer.
	answered func(n int)

	mu       sync.Mutex
	acquires int
}

func (d *shutReleases) Acquire(ctx context.Context, reqs []driver.AcquireArg) ([]driver.AcquireReply, error) {
	d.mu.Lock()
	d.acquires++
	n := d.acquires
	d.mu.Unlock()
	reps, err := d.Driver.Acquire(ctx, reqs)
	if d.answered != nil {
		d.answered(n)
	}
	return reps, err
}

func (d *shutReleases) Release(ctx context.Context, rs []driver.ReleaseArg) ([]driver.ReleaseReply, error) {
	select {
	case <-d.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.Driver.Release(ctx, rs)
}

func (d *shutReleases) sent() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acquires
}

type ignoreRelease struct{}

func (ignoreRelease) AfterRelease(Released, error) {}

// ownReleaseDrivers are the drivers the own-release tests run on.
var ownReleaseDrivers = map[string]func(t *testing.T) driver.Driver{
	"memory": func(*testing.T) driver.Driver { return memdriver.New() },
	"redis": func(t *testing.T) driver.Driver {
		c := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr})
		t.Cleanup(func() { c.Close() })
		d, err := redisdriver.New(c, "own", driver.AcksAuto)
		if err != nil {
			t.Fatal(err)
		}
		return d
	},
}

// ownReleaseScene is a store whose releases d holds, after the runs of
// two entities of one chunk of tick t1 ended, their releases on their
// way; tick makes a tick's requests for them.
type ownReleaseScene struct {
	st   *Store
	d    *shutReleases
	t1   time.Time
	tick func(at time.Time) []driver.Request
}

func newOwnReleaseScene(t *testing.T, inner driver.Driver) *ownReleaseScene {
	ctx := context.Background()
	if a, ok := inner.(driver.Admin); ok { // a new Redis: no quarantine
		if err := a.InitEpoch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sc := &ownReleaseScene{d: &shutReleases{Driver: inner, open: make(chan struct{})}}
	sc.st = New(sc.d, Options{Replica: "r1"})
	t.Cleanup(func() { sc.st.Stop(context.Background()) })
	sc.t1 = time.Now().Truncate(time.Second).Add(-2 * time.Second) // both ticks are due
	sc.tick = func(at time.Time) []driver.Request {
		var reqs []driver.Request
		for _, e := range []string{"e1", "e2"} {
			reqs = append(reqs, driver.Request{Task: "t", Entity: e, TTL: 30 * time.Second, Reason: driver.ReasonTick, Tick: at, Chunk: at.String()})
		}
		return reqs
	}
	for _, r := range sc.st.AcquireBatch(ctx, sc.tick(sc.t1)) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		r.Lease.ReleaseThen(driver.Finished{Outcome: driver.OutcomeDone, Started: sc.t1, Ended: sc.t1}, nil, ignoreRelease{})
	}
	return sc
}

// nextTickGranted says that the next tick's acquire, got, granted both.
func nextTickGranted(t *testing.T, got <-chan []Result) {
	t.Helper()
	select {
	case rs := <-got:
		for i, r := range rs {
			if r.Err != nil {
				var be *BusyError
				t.Fatalf("the next tick's acquire of e%d: %v (busy with the run that ended here: %v)", i+1, r.Err, errors.As(r.Err, &be))
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next tick's acquire did not return")
	}
}

// eachOwnReleaseScene runs fn on a scene of each driver, in parallel.
func eachOwnReleaseScene(t *testing.T, fn func(t *testing.T, sc *ownReleaseScene)) {
	for name, newDriver := range ownReleaseDrivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newOwnReleaseScene(t, newDriver(t)))
		})
	}
}

// nextTick sends the next tick's acquire, and answers its results.
func (sc *ownReleaseScene) nextTick() <-chan []Result {
	got := make(chan []Result, 1)
	go func() { got <- sc.st.AcquireBatch(context.Background(), sc.tick(sc.t1.Add(time.Second))) }()
	return got
}

// TestOwnReleaseIsWaitedFor: an entity whose run ended on this store, its
// release on its way, is not busy to this store's next fan-out: the
// acquires refused busy by those releases are sent again once they landed
// (a run's slot goes back before its release lands), alone and not as the
// chunk they came in, which the refusing call took. AwaitOwnRelease
// returns only once the release landed, or its context ended.
func TestOwnReleaseIsWaitedFor(t *testing.T) {
	t.Parallel()
	eachOwnReleaseScene(t, func(t *testing.T, sc *ownReleaseScene) {
		ctx := context.Background()
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		expect.True(t, "a release on its way is waited for", sc.st.AwaitOwnRelease(short, "t", "e1"))
		expect.True(t, "the wait ends with its context while the release is held", short.Err() != nil)

		got := sc.nextTick()
		expect.WaitFor(t, 10*time.Second, "the next tick's acquire sent while the releases are held", func() bool { return sc.d.sent() == 2 })
		close(sc.d.open)
		nextTickGranted(t, got)
		expect.True(t, "no release on its way once it landed", !sc.st.AwaitOwnRelease(ctx, "t", "e1"))
	})
}

// TestOwnReleaseLandingAfterTheRefusal: the releases land after the driver
// refused the next tick's acquire as busy with them and before the store
// looks for releases on their way. The entities are asked for again all
// the same (this store no longer holds their leases), not skipped as busy.
func TestOwnReleaseLandingAfterTheRefusal(t *testing.T) {
	t.Parallel()
	eachOwnReleaseScene(t, func(t *testing.T, sc *ownReleaseScene) {
		sc.d.answered = func(n int) {
			if n == 2 { // the next tick's acquire, refused: the releases land now
				close(sc.d.open)
				sc.st.AwaitOwnRelease(context.Background(), "t", "e1")
				sc.st.AwaitOwnRelease(context.Background(), "t", "e2")
			}
		}
		nextTickGranted(t, sc.nextTick())
		expect.Equal(t, "acquire calls: the first tick's, the refused one, the one sent again", sc.d.sent(), 3)
	})
}
