package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
)

// Compare runs ops random operations, drawn from seed, against a store on
// a driver of a and one on a driver of b, and fails t at the first answer
// where they differ: grants and their refusals, releases, tick records,
// actions, failures and pauses, and every read after. tickd holds its
// in-process driver to its Redis one with it (a Go twin of Lua scripts
// drifts); a third driver can be held to either. Log the seed: a failure
// names the operation, and the same seed replays it.
func Compare(t *testing.T, a, b Kit, seed uint64, ops int) {
	t.Helper()
	t.Logf("seed %d, %d operations", seed, ops)
	d := &differ{
		t:    t,
		rnd:  rand.New(rand.NewPCG(seed, 1)),
		now:  time.Now().Truncate(time.Hour).Add(-24 * time.Hour),
		a:    storesOn(t, a, 1, &calls{})(lease.Options{Replica: "diff"}),
		b:    storesOn(t, b, 1, &calls{})(lease.Options{Replica: "diff"}),
		held: map[string][2]*lease.Lease{},
	}
	for i := range ops {
		d.step(i)
		if t.Failed() {
			t.Fatalf("the stores disagree at operation %d (seed %d)", i, seed)
		}
	}
	d.releaseAll()
}

// differ drives both stores and compares their answers.
type differ struct {
	t    *testing.T
	rnd  *rand.Rand
	now  time.Time                  // the operations' notion of now: a day ago, moving on
	a, b *lease.Store               // a store on a driver of each kit
	held map[string][2]*lease.Lease // task/entity -> the lease on each store
}

var (
	diffTasks    = []string{"sync", "bill"}
	diffEntities = []string{"e1", "e2", "e3", "a/b", "x y"}
	diffReplicas = []string{"r1", "r2", "r3"}
)

func (d *differ) pick(xs []string) string { return xs[d.rnd.IntN(len(xs))] }

func (d *differ) step(i int) {
	d.now = d.now.Add(time.Duration(d.rnd.IntN(90)) * time.Second)
	switch n := d.rnd.IntN(100); {
	case n < 35:
		d.recordTick()
	case n < 45:
		d.recordAction()
	case n < 55:
		d.recordFailure()
	case n < 65:
		d.pauseOrResume()
	case n < 85:
		d.acquire()
	default:
		d.release()
	}
	if i%10 == 0 {
		d.compareReads()
	}
}

// both runs op on each store; the answers must be the same.
func both[T any](d *differ, what string, op func(s *lease.Store) (T, error)) {
	d.t.Helper()
	r, rerr := op(d.a)
	m, merr := op(d.b)
	if !sameError(rerr, merr) {
		d.t.Errorf("%s: a %v, b %v", what, rerr, merr)
		return
	}
	if !reflect.DeepEqual(r, m) {
		d.t.Errorf("%s:\n a %+v\n b %+v", what, r, m)
	}
}

// sameError: both nil, or of the same kind.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	for _, kind := range []error{lease.ErrBusy, lease.ErrAlreadyRan, lease.ErrQuarantine, driver.ErrNotHeld} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}

// recordTick writes a replica's part of a tick near now, some of them
// older than the retention keeps or the tick scan reaches.
func (d *differ) recordTick() {
	tick := d.now.Add(-time.Duration(d.rnd.IntN(60)) * 15 * time.Minute).Truncate(time.Minute)
	w := driver.TickWrite{
		Task: d.pick(diffTasks),
		Tick: tick,
		Part: driver.TickPart{
			Replica: d.pick(diffReplicas), Final: d.rnd.IntN(2) == 0, Written: d.now.Truncate(time.Millisecond),
			Entities: d.rnd.IntN(1000), Started: d.rnd.IntN(1000),
			Outcomes:   map[driver.Outcome]int{driver.OutcomeDone: d.rnd.IntN(50), driver.OutcomeFailed: d.rnd.IntN(3)},
			Skipped:    map[string]int{"busy": d.rnd.IntN(5)},
			FirstStart: time.Duration(d.rnd.IntN(5000)) * time.Millisecond, LastEnd: -1,
		},
		// Mostly a long age, at times a short one: a write then finds many
		// records too old at once (more than driver.TickAgeDrop).
		Keep: driver.Retention{Ticks: 60, Age: 24 * time.Hour},
	}
	switch d.rnd.IntN(10) {
	case 0:
		w.Keep.Age = time.Duration(1+d.rnd.IntN(3)) * time.Hour
	case 1:
		w.Keep.Ticks = 1 + d.rnd.IntN(60)
	}
	both(d, fmt.Sprintf("record tick %s@%s by %s", w.Task, w.Tick.Format(time.TimeOnly), w.Part.Replica),
		func(s *lease.Store) (struct{}, error) {
			return struct{}{}, s.Fleet().RecordTicks(context.Background(), []driver.TickWrite{w})
		})
	both(d, "ticks of "+w.Task+" after the write", func(s *lease.Store) ([]driver.TickRecord, error) {
		return s.Fleet().Ticks(context.Background(), w.Task, 100)
	})
}

func (d *differ) recordAction() {
	a := driver.Action{Task: d.pick(diffTasks), At: d.now.UTC(), By: d.pick(diffReplicas), What: driver.ActionTrigger,
		Entities: []string{d.pick(diffEntities)}, Reason: "diff"}
	keep := driver.Retention{Actions: 1 + d.rnd.IntN(8)}
	both(d, "record action", func(s *lease.Store) (struct{}, error) {
		return struct{}{}, s.Fleet().RecordAction(context.Background(), a, keep)
	})
}

func (d *differ) recordFailure() {
	f := driver.Failure{Task: d.pick(diffTasks), Entity: d.pick(diffEntities), Tick: d.now.UTC(), Reason: driver.ReasonTick,
		Replica: d.pick(diffReplicas), Started: d.now.UTC(), Ended: d.now.UTC(), Outcome: driver.OutcomeFailed, Error: "exit 1"}
	n := 1 + d.rnd.IntN(6)
	keep := func(string) driver.Retention { return driver.Retention{Failures: n} }
	both(d, "record failure", func(s *lease.Store) (struct{}, error) {
		return struct{}{}, s.Fleet().RecordFailures(context.Background(), []driver.Failure{f}, keep)
	})
}

func (d *differ) pauseOrResume() {
	task := d.pick(diffTasks)
	if d.rnd.IntN(2) == 0 {
		both(d, "resume "+task, func(s *lease.Store) (struct{}, error) {
			return struct{}{}, s.Fleet().Resume(context.Background(), task)
		})
		return
	}
	p := driver.PauseInfo{By: d.pick(diffReplicas), At: d.now.UTC(), Reason: "diff"}
	if d.rnd.IntN(2) == 0 {
		p.Until = time.Now().Add(time.Hour).UTC().Truncate(time.Second) // not over while the test runs
	}
	both(d, "pause "+task, func(s *lease.Store) (struct{}, error) {
		return struct{}{}, s.Fleet().Pause(context.Background(), task, p)
	})
}

// acquire asks for a tick run of an entity at a tick in the past (ticks
// ahead of the store's clock are refused by each for its own clock).
func (d *differ) acquire() {
	task, entity := d.pick(diffTasks), d.pick(diffEntities)
	req := driver.Request{Task: task, Entity: entity, TTL: time.Minute, Reason: driver.ReasonTick,
		Tick: d.now.Truncate(15 * time.Minute).Add(-time.Duration(d.rnd.IntN(3)) * 15 * time.Minute)}
	switch d.rnd.IntN(4) {
	case 0:
		req.Reason, req.Tick = driver.ReasonTrigger, time.Time{}
	case 1:
		req.Queue = true // a busy entity gets a follow-up after its holder
	}
	var got [2]*lease.Lease
	i := 0
	both(d, fmt.Sprintf("acquire %s/%s %s", task, entity, req.Reason), func(s *lease.Store) (bool, error) {
		l, err := s.Acquire(context.Background(), req)
		got[i] = l
		i++
		return l != nil, err
	})
	if got[0] != nil && got[1] != nil {
		d.held[task+"/"+entity] = got
	} else {
		for _, l := range got {
			if l != nil {
				l.Release(context.Background(), driver.Finished{Outcome: driver.OutcomeDone}, nil) //nolint:errcheck // the test has failed
			}
		}
	}
}

// release ends one held lease on both stores with a random outcome.
func (d *differ) release() {
	for key, ls := range d.held {
		o := []driver.Outcome{driver.OutcomeDone, driver.OutcomeFailed, driver.OutcomeReschedule}[d.rnd.IntN(3)]
		i := 0
		both(d, "release "+key, func(s *lease.Store) (lease.Released, error) {
			l := ls[i]
			i++
			return l.Release(context.Background(), driver.Finished{Outcome: o, Started: d.now, Ended: d.now}, nil)
		})
		delete(d.held, key)
		return // one
	}
}

func (d *differ) releaseAll() {
	for len(d.held) > 0 {
		d.release()
	}
}

// compareReads reads everything the operations wrote back from both.
func (d *differ) compareReads() {
	ctx := context.Background()
	for _, task := range diffTasks {
		both(d, "ticks of "+task, func(s *lease.Store) ([]driver.TickRecord, error) { return s.Fleet().Ticks(ctx, task, 100) })
		both(d, "actions of "+task, func(s *lease.Store) ([]driver.Action, error) { return s.Fleet().Actions(ctx, task, 100) })
		both(d, "failures of "+task, func(s *lease.Store) ([]driver.Failure, error) { return s.Fleet().Failures(ctx, task, 100) })
	}
	both(d, "pauses", func(s *lease.Store) (map[string]driver.PauseInfo, error) { return s.Fleet().Pauses(ctx) })
}
