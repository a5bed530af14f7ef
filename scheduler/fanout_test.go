package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/redistest"
	"github.com/tickd/tickd/lease"
)

// shiftedClock reads the system clock shifted by a constant.
type shiftedClock time.Duration

func (c shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// A fan-out that finds its first batch taken by another replica skips ahead
// (fanOut.jump). If that replica died just after it took the batch, the part
// skipped is its no more: it must still run in the tick, from revisit.
func TestSkippedChunksRunWhenTheirTakerDied(t *testing.T) {
	e := newEnv(t, true)
	const concurrency = 64 // the first batch: 4 chunks
	n := concurrency + jumpChunks*chunkSize + 100
	cfg := `
[[tasks]]
name = "jump"
every = "1h"
catch_up = "1h"
handler = "rec"
concurrency = ` + strconv.Itoa(concurrency) + `
lease_ttl = "30s"
entities = ` + entities(n)
	// The scheduler's clock is kept away from the hour's end, so that its
	// catch-up tick is T.
	var shift time.Duration
	if m := time.Now().Minute(); m < 5 || m >= 55 {
		shift = -10 * time.Minute
	}
	clock := shiftedClock(shift)
	T := Prev(e.config(cfg).Tasks[0].Schedule, clock.Now(), time.Hour)

	// The dead replica took the first batch's chunks, then died: it holds
	// their leases and runs nothing.
	var reqs []lease.Request
	ids := make([]string, concurrency)
	for i := range ids {
		ids[i] = fmt.Sprint("e", i)
	}
	for i, id := range ids {
		c := i / chunkSize * chunkSize
		reqs = append(reqs, lease.Request{Task: "jump", Entity: id, TTL: 30 * time.Second, Reason: lease.ReasonTick, Tick: T,
			Chunk: chunkName(ids[c : c+chunkSize])})
	}
	for i, r := range e.store("dead").AcquireBatch(context.Background(), reqs) {
		if r.Err != nil {
			t.Fatalf("the dead replica's lease of %s: %v", reqs[i].Entity, r.Err)
		}
	}

	e.run(cfg, Options{Store: e.store("r1"), Clock: clock})
	e.ev.waitFor(t, 30*time.Second, "tick "+T.String(), func(ev Event) bool { return ev.Kind == EventTick && ev.Tick.Equal(T) })
	// The tick is reported once its last batch is answered: its runs may
	// not have reached their handler yet. Wait for them, then say which
	// are missing.
	var runs map[string]int
	deadline := time.Now().Add(10 * time.Second)
	for {
		runs = map[string]int{}
		for _, r := range e.rec.snapshot() {
			if r.Tick.Equal(T) {
				runs[r.Entity]++
			}
		}
		if len(runs) >= n-concurrency || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	var missing []string
	for i := range n {
		id := fmt.Sprint("e", i)
		switch want := min(1, i/concurrency); {
		case runs[id] > want:
			t.Fatalf("%s ran %d times", id, runs[id])
		case runs[id] < want:
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d entities never ran in the tick, from %s to %s", len(missing), missing[0], missing[len(missing)-1])
	}
	c := e.ev.events(kind(EventTick))[0].Counts
	if c.Started != n-concurrency || c.AlreadyRan != concurrency {
		t.Fatalf("tick counts %+v: want %d started, %d already run", c, n-concurrency, concurrency)
	}
}

// Replicas that fan out one tick from the same stream do not each send every
// chunk: the ones that lose a batch skip ahead. Each entity still runs at
// most once per tick, and every replica runs some.
func TestReplicasSkipAhead(t *testing.T) {
	e := newEnv(t, true)
	const n = 4000
	cfg := `
[[tasks]]
name = "many"
every = "2s"
handler = "rec"
concurrency = 256
lease_ttl = "3s"
entities = ` + entities(n)
	st := e.store("r0") // InitEpoch: a Redis new to tickd
	var scheds []*Scheduler
	for i := range 3 {
		if i > 0 {
			st = e.store(fmt.Sprint("r", i))
		}
		scheds = append(scheds, e.run(cfg, Options{Store: st}))
	}
	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	defer c.Close()
	// done lists the ticks since from that all three replicas fanned out.
	done := func(from time.Time) []time.Time {
		byTick := map[time.Time]int{}
		for _, ev := range e.ev.events(kind(EventTick)) {
			if !ev.Tick.Before(from) {
				byTick[ev.Tick]++
			}
		}
		var out []time.Time
		for T, k := range byTick {
			if k == 3 {
				out = append(out, T)
			}
		}
		return out
	}
	redistest.WaitFor(t, 30*time.Second, "a first tick", func() bool { return len(done(time.Time{})) > 0 })
	// From the next tick on: three ticks, their SADDs (one per chunk taken
	// or lost) counted.
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	redistest.WaitFor(t, 60*time.Second, "three ticks fanned out by every replica", func() bool { return len(done(start)) >= 3 })
	for _, s := range scheds {
		s.Shutdown(5 * time.Second)
	}
	seen := map[string]int{}
	for _, r := range e.rec.snapshot() {
		seen[r.Entity+"@"+r.Tick.String()]++
	}
	for k, m := range seen {
		if m != 1 {
			t.Fatalf("%s ran %d times", k, m)
		}
	}
	byReplica := map[string]int{}
	for _, ev := range e.ev.events(kind(EventRunStarted)) {
		byReplica[ev.Replica]++
	}
	if len(byReplica) != 3 {
		t.Fatalf("runs by replica %v: one replica did not run any", byReplica)
	}
	// Ticks begun since the reset: the three, and perhaps one that the
	// shutdown cut short.
	begun := map[time.Time]bool{}
	for _, r := range e.rec.snapshot() {
		if !r.Tick.Before(start) {
			begun[r.Tick] = true
		}
	}
	sadd := redistest.CommandCalls(t, c, "sadd")
	// Without skipping ahead, each replica sends each chunk: 3 per chunk.
	perChunk := float64(sadd) / float64(len(begun)*n/chunkSize)
	t.Logf("%d ticks since the reset, %d SADDs: %.2f per chunk; runs by replica %v", len(begun), sadd, perChunk, byReplica)
	if perChunk > 2 {
		t.Fatalf("%.2f chunk claims per chunk of a tick: the replicas each sent every chunk", perChunk)
	}
}
