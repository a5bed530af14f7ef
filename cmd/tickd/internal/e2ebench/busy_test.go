package e2ebench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
)

// BenchmarkTickAllBusy is BenchmarkTick's slow path: at every tick each entity
// is busy. Before the first tick a holder took every lease for the tick
// before it, in the chunks a fan-out takes them in (another replica whose
// runs are still going, as far as tickd can tell), for longer than the
// benchmark, and never releases them; the peer's locks are held by another
// owner alike. A side's tick is how long it takes to find every entity
// busy (tickd: until its fan-out ends), and its "runs" are the entities it
// found busy: its Redis CPU is per entity.
//
//	go test -run XXX -bench TickAllBusy -benchtime 1x ./cmd/tickd/internal/e2ebench
//
// It reads the settings BenchmarkTick reads, E2E_PEER aside.
func BenchmarkTickAllBusy(b *testing.B) {
	srv, ids, ticks, every := setup(b, 100000, 20*time.Second)
	tgt := single(srv.Addr)
	tgt.busy = true
	hold(b, srv.Addr, ids, time.Now().Truncate(every))
	for range b.N {
		var t, p side
		if os.Getenv("E2E_PEER") == "0" {
			t = runTickd(b, tgt, ids, 1, ticks, every)
		} else {
			t, p = interleaved(b, tgt, ids, 1, ticks, every)
		}
		report(b, 1, t, p)
	}
}

// hold takes every one of ids for tick T, an hour long: tickd's leases of
// the benchmark's task, as its fan-out would take them, and the peer's
// locks.
func hold(b *testing.B, addr string, ids []string, T time.Time) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	st, err := stores.Redis(c, "e2e", lease.Options{Replica: "holder", MaxTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	st.InitEpoch(ctx) //nolint:errcheck
	chunks := scheduler.ChunkOf(ids, concurrency)
	reqs := make([]driver.Request, 0, driver.BatchSize)
	for i, id := range ids {
		reqs = append(reqs, driver.Request{Task: "bench", Entity: id, TTL: time.Hour, Reason: driver.ReasonTick, Tick: T, Chunk: chunks[i]})
		if len(reqs) < driver.BatchSize && i < len(ids)-1 {
			continue
		}
		for j, r := range st.AcquireBatch(ctx, reqs) {
			if r.Err != nil {
				b.Fatalf("the holder's lease of %s: %v", reqs[j].Entity, r.Err)
			}
		}
		reqs = reqs[:0]
	}
	st.Stop(ctx) //nolint:errcheck // ErrStillHeld: the leases are kept, unrenewed
	pipe := c.Pipeline()
	for i, id := range ids {
		pipe.Set(ctx, "peer:"+id, "holder", time.Hour)
		if i%10000 == 9999 || i == len(ids)-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// fannedOutBusy counts a replica's fan-out of a tick in BenchmarkTickAllBusy:
// the tick is done once each replica's has ended.
func (td *tickd) fannedOutBusy(ev scheduler.Event) {
	r := td.tick(ev.Tick)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs += ev.Counts.Busy
	r.byReplica[ev.Replica] += ev.Counts.Busy
	r.fanOuts++
	if r.fanOuts == len(td.scheds) {
		r.lastEnd = time.Now()
		close(r.all)
	}
}
