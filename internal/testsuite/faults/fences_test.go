package faults

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/pgtest"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// guards are a scenario's sinks behind the fence guards: a Postgres and a
// Redis of their own (not the scenario's, which its faults hit), and the
// sink that writes to them (tickdtest.FenceSink).
type guards struct {
	pg   *pgtest.Server
	rdb  *redis.Client
	sink tickdtest.Sink
}

// writeThroughGuards has the runs of entities (all, when none is named)
// write through the fence guards when they start and when they end
// (stopped too): give it before the replicas start.
func (c *cluster) writeThroughGuards(entities ...string) *guards {
	g := &guards{pg: pgtest.Start(c.t)}
	srv := redistest.Start(c.t)
	g.rdb = redis.NewClient(&redis.Options{Addr: srv.Addr})
	c.t.Cleanup(func() { g.rdb.Close() })
	g.sink = tickdtest.FenceSink(c.t, g.pg.DSN(), srv.Addr)
	for _, r := range c.reps {
		r.env = append(r.env, g.sink.Env(entities...)...)
	}
	return g
}

// guardFigures are what the guards did in a scenario.
type guardFigures struct {
	writes int // the writes Postgres committed
	// outOfOrder: by guard, the writes it accepted below a fence that had
	// written under their key before (stale writes accepted).
	outOfOrder map[string]int
	// Of the writes stale runs made after a newer run of their entity had
	// written (superseded): by guard, those refused, those let through,
	// and those that did not reach it (lost: the run was killed first).
	superseded          int
	refused, letThrough map[string]int
	lost                int
}

// judge counts what the guards accepted out of fence order and what they
// did with the writes stale runs made after a newer run of their entity
// had written. stale says which runs are.
func (g *guards) judge(c *cluster, stale func(tickdtest.Run) bool) guardFigures {
	t := c.t
	f := guardFigures{outOfOrder: map[string]int{}, refused: map[string]int{}, letThrough: map[string]int{}}
	byGuard := map[string]map[string][]int64{"postgres": {}, "redis": {}, "http": g.sink.HTTPLog(t)}
	for _, row := range strings.Split(g.pg.Exec(t, "SELECT key || '|' || fence FROM tickd_writes ORDER BY seq"), "\n") {
		if key, fence, ok := strings.Cut(row, "|"); ok {
			f.writes++
			n, _ := strconv.ParseInt(fence, 10, 64)
			byGuard["postgres"][key] = append(byGuard["postgres"][key], n)
		}
	}
	ctx := context.Background()
	keys, _ := g.rdb.Keys(ctx, "*:writes").Result()
	for _, k := range keys {
		vals, _ := g.rdb.LRange(ctx, k, 0, -1).Result()
		key := strings.TrimSuffix(strings.TrimPrefix(k, "{"), "}:writes")
		for _, v := range vals {
			n, _ := strconv.ParseInt(v, 10, 64)
			byGuard["redis"][key] = append(byGuard["redis"][key], n)
		}
	}
	for guard, keys := range byGuard {
		for _, fences := range keys {
			high := int64(0)
			for _, fence := range fences {
				if fence < high {
					f.outOfOrder[guard]++
				}
				high = max(high, fence)
			}
		}
	}
	runs := tickdtest.ReadRuns(t, c.runsLog)
	for _, r := range runs {
		if !stale(r) {
			continue
		}
		for _, w := range append([]tickdtest.Record{r.Start, r.End}, r.Writes...) {
			if w.Guards == nil || !newerWrote(runs, r, w.GuardAt) {
				continue
			}
			f.superseded++
			if _, ok := w.Guards["sink"]; ok {
				f.lost++
				continue
			}
			for guard, did := range w.Guards {
				switch did {
				case "refused":
					f.refused[guard]++
				case "accepted":
					f.letThrough[guard]++
				}
			}
		}
	}
	return f
}

// newerWrote says whether a run of r's entity with a higher fence had
// written through the guards (its start record) before at.
func newerWrote(runs []tickdtest.Run, r tickdtest.Run, at int64) bool {
	for _, n := range runs {
		if n.Start.Entity == r.Start.Entity && n.Start.Task == r.Start.Task && n.Start.Fence > r.Start.Fence &&
			n.Start.Guards != nil && n.Start.At < at {
			return true
		}
	}
	return false
}

// everyTenth are the entities of every tenth index, e0, e10…
func everyTenth() []string {
	var out []string
	for i := 0; i < nEntities; i += 10 {
		out = append(out, fmt.Sprint("e", i))
	}
	return out
}

// judgeGuards judges g as a scenario without stale runs of its own
// making: a run's write after a newer run's of its entity must be refused
// all the same. It adds the figures to r's.
func (g *guards) judgeGuards(c *cluster, r *result) {
	f := g.judge(c, func(tickdtest.Run) bool { return true })
	r.extra = strings.TrimSpace(r.extra + " " + f.String())
	f.held(c.t, false)
}

// String is the figures as a scenario's summary says them.
func (f guardFigures) String() string {
	return fmt.Sprintf("guarded_writes=%d stale_writes_accepted=%d stale_writes_refused=%d/%d/%d of %d (postgres/redis/http; %d lost)",
		f.writes, f.outOfOrder["postgres"]+f.outOfOrder["redis"]+f.outOfOrder["http"],
		f.refused["postgres"], f.refused["redis"], f.refused["http"], f.superseded, f.lost)
}

// held fails the scenario when a guard accepted a write out of fence
// order or let a superseded stale run's write through, or, when mustTry,
// when it refused none: the scenario then proved nothing of them.
func (f guardFigures) held(t *testing.T, mustTry bool) {
	for _, guard := range []string{"postgres", "redis", "http"} {
		if f.outOfOrder[guard] != 0 {
			failf(t, "the %s guard accepted %d writes below a fence that had written", guard, f.outOfOrder[guard])
		}
		if f.letThrough[guard] != 0 {
			failf(t, "the %s guard let through %d writes stale runs made after a newer run's", guard, f.letThrough[guard])
		}
		if mustTry && f.refused[guard] == 0 {
			failf(t, "the %s guard refused no stale run's write: the scenario did not try it", guard)
		}
	}
}
