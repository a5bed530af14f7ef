package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/memdriver"
)

// gatedReleases holds every release until open is closed (or its call
// gives up), and keeps the entities it was asked to acquire and how many
// releases it answered.
type gatedReleases struct {
	driver.Driver
	open chan struct{}

	mu       sync.Mutex
	asked    []string
	answered int
}

func (d *gatedReleases) Acquire(ctx context.Context, reqs []driver.AcquireArg) ([]driver.AcquireReply, error) {
	d.mu.Lock()
	for _, r := range reqs {
		d.asked = append(d.asked, r.Req.Entity)
	}
	d.mu.Unlock()
	return d.Driver.Acquire(ctx, reqs)
}

func (d *gatedReleases) Release(ctx context.Context, rs []driver.ReleaseArg) ([]driver.ReleaseReply, error) {
	defer func() {
		d.mu.Lock()
		d.answered++
		d.mu.Unlock()
	}()
	select {
	case <-d.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.Driver.Release(ctx, rs)
}

// seen is the entities asked for so far, and the releases answered.
func (d *gatedReleases) seen() (asked []string, answered int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...), d.answered
}

// TestSlotFreesWhenTheHandlerReturns: a task's concurrency bounds its
// handlers at once, and a run's slot is free once its handler returned,
// not once its release (a round trip, batched) landed: with concurrency 1
// and every release held, the second entity runs. At most concurrency runs
// wait on their release so: the third is not even asked for until one
// lands, so that the task holds at most twice its concurrency in leases.
func TestSlotFreesWhenTheHandlerReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	d := &gatedReleases{Driver: memdriver.New(), open: make(chan struct{})}
	s := e.startOn(d, "[[tasks]]\nname = \"slots\"\nevery = \"1h\"\ncatch_up = \"1h\"\nhandler = \"rec\"\nconcurrency = 1\nentities = [\"a\", \"b\", \"c\"]\n")
	defer stopWithin(s, 5*time.Second)
	ran := func() int { return e.rec.count(func(runRec) bool { return true }) }
	expect.WaitFor(t, 10*time.Second, "the second run", func() bool { return ran() >= 2 })
	if _, answered := d.seen(); answered > 0 {
		t.Fatalf("the second run started once %d release(s) gave up, not while the first's was held", answered)
	}
	// The second run kept its slot (one run already waits on its release):
	// the fan-out cannot take one, so the third entity is not asked for.
	ts := func() *taskState {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.tasks["slots"]
	}()
	expect.WaitFor(t, 10*time.Second, "the second run keeping its slot", func() bool {
		return ts.releasing.Load() == 1 && len(ts.slots) == cap(ts.slots)
	})
	asked, _ := d.seen()
	expect.Equal(t, "entities asked for while two releases are held", len(asked), 2)
	close(d.open)
	expect.WaitFor(t, 10*time.Second, "three runs ended", func() bool { return e.ev.count(kind(EventRunEnded)) == 3 })
	runs := e.rec.snapshot()
	for i := 1; i < len(runs); i++ {
		if runs[i].start.Before(runs[i-1].end) {
			t.Fatalf("handlers of %s and %s overlapped under concurrency 1", runs[i-1].Entity, runs[i].Entity)
		}
	}
}

// TestAStoppedFanOutSendsNothing: a fan-out stopped (here by a pause) with
// a batch gathered and not sent sends none of it: no run starts after the
// pause, no entity counts as an error (a lease asked for under a
// cancelled context fails), and the batch's run slots are given back; the
// tick's record counts its entities as not come to, as the rest of the
// stream. A batch waits for run slots while runs hold others (awaitFill),
// so a pause often finds one. Before, the in-process store started the
// batch's runs after the pause, and Redis's refusals counted as errors.
func TestAStoppedFanOutSendsNothing(t *testing.T) {
	t.Parallel()
	bothStores(t, stoppedFanOutSendsNothing)
}

func stoppedFanOutSendsNothing(t *testing.T, withRedis bool) {
	e := newEnv(t, withRedis)
	s, _ := e.start("[[tasks]]\nname = \"p\"\nevery = \"1h\"\nhandler = \"rec\"\nentities = [\"a\", \"b\"]\n")
	ts := taskStateOf(s, "p")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errPaused)
	T := time.Now().Truncate(time.Hour)
	f := &fanOut{s: s, ts: ts, T: T, reason: driver.ReasonTick, ctx: ctx, tl: s.history.begin(ctx, ts.t, T, ""), n: &TickCounts{Entities: 2}, name: "p"}
	for _, id := range []string{"a", "b"} {
		ts.slots <- struct{}{}
		f.batch = append(f.batch, id)
	}
	f.flush()
	expect.Equal(t, "counts", fmt.Sprintf("%+v", *f.n), fmt.Sprintf("%+v", TickCounts{Entities: 2}))
	expect.Equal(t, "slots held", len(ts.slots), 0)
	expect.Equal(t, "batch", len(f.batch), 0)
	expect.Equal(t, "runs", e.rec.count(func(runRec) bool { return true }), 0)
}
