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

	mu       sync.Mutex
	acquires int
}

func (d *shutReleases) Acquire(ctx context.Context, reqs []driver.AcquireArg) ([]driver.AcquireReply, error) {
	d.mu.Lock()
	d.acquires++
	d.mu.Unlock()
	return d.Driver.Acquire(ctx, reqs)
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

// TestOwnReleaseIsWaitedFor: an entity whose run ended on this store, its
// release on its way, is not busy to this store's next fan-out: the
// acquires refused busy by those releases are sent again once they landed
// (a run's slot goes back before its release lands), alone and not as the
// chunk they came in, which the refusing call took. AwaitOwnRelease
// returns only once the release landed, or its context ended.
func TestOwnReleaseIsWaitedFor(t *testing.T) {
	t.Parallel()
	drivers := map[string]func(t *testing.T) driver.Driver{
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
	for name, newDriver := range drivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			inner := newDriver(t)
			if a, ok := inner.(driver.Admin); ok { // a new Redis: no quarantine
				if err := a.InitEpoch(ctx); err != nil {
					t.Fatal(err)
				}
			}
			d := &shutReleases{Driver: inner, open: make(chan struct{})}
			st := New(d, Options{Replica: "r1"})
			t.Cleanup(func() { st.Stop(context.Background()) })
			t1 := time.Now().Truncate(time.Second).Add(-2 * time.Second) // both ticks are due
			tick := func(at time.Time) []driver.Request {
				var reqs []driver.Request
				for _, e := range []string{"e1", "e2"} {
					reqs = append(reqs, driver.Request{Task: "t", Entity: e, TTL: 30 * time.Second, Reason: driver.ReasonTick, Tick: at, Chunk: at.String()})
				}
				return reqs
			}
			for _, r := range st.AcquireBatch(ctx, tick(t1)) {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				r.Lease.ReleaseThen(driver.Finished{Outcome: driver.OutcomeDone, Started: t1, Ended: t1}, nil, ignoreRelease{})
			}

			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			expect.True(t, "a release on its way is waited for", st.AwaitOwnRelease(short, "t", "e1"))
			expect.True(t, "the wait ends with its context while the release is held", short.Err() != nil)

			got := make(chan []Result, 1)
			go func() { got <- st.AcquireBatch(ctx, tick(t1.Add(time.Second))) }()
			expect.WaitFor(t, 10*time.Second, "the next tick's acquire sent while the releases are held", func() bool { return d.sent() == 2 })
			close(d.open)
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
			expect.True(t, "no release on its way once it landed", !st.AwaitOwnRelease(ctx, "t", "e1"))
		})
	}
}
