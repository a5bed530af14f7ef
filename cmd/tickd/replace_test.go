package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/pgtest"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
	"github.com/tickd/tickd/lease/driver"
)

// replaceTTL and replaceEvery are the replace tests'
// lease_ttl and tick interval.
const (
	replaceTTL   = 5 * time.Second
	replaceEvery = 3 * time.Second
)

// replaceTask is the replace tests' task, over entities (TOML strings):
// a tick every replaceEvery, lease_ttl replaceTTL, on_busy = "replace".
func replaceTask(entities string) string {
	return fmt.Sprintf(`
[[tasks]]
name = "hung"
every = %q
lease_ttl = %q
on_busy = "replace"
entities = [%s]
command = ["WORKER"]
`, replaceEvery, replaceTTL, entities)
}

// replicasAB starts replicas A and B on e's config, their runs an hour
// long (those of the entities env's TESTWORKER_SLOW lists) with env, and
// returns them, ready, by pid.
func replicasAB(t *testing.T, e *opsEnv, env ...string) map[int]*tickdtest.Proc {
	t.Helper()
	env = append([]string{"TESTWORKER_LOG=" + e.runs, "TESTWORKER_SLOW_SLEEP=1h"}, env...)
	procs := map[int]*tickdtest.Proc{}
	for _, name := range []string{"A", "B"} {
		p := tickdtest.Start(t, name, env, "-config", e.cfg)
		p.WaitReady(20 * time.Second)
		procs[p.Pid()] = p
	}
	return procs
}

// successorOf is the first run of entity that started after old did, and
// whether there is one.
func successorOf(runs []tickdtest.Run, old tickdtest.Run) (tickdtest.Run, bool) {
	for _, r := range runs {
		if r.Start.Entity == old.Start.Entity && r.Start.At > old.Start.At {
			return r, true
		}
	}
	return tickdtest.Run{}, false
}

// sameRun is r as runs have it now: with its end record, if it has one.
func sameRun(runs []tickdtest.Run, r tickdtest.Run) tickdtest.Run {
	for _, x := range runs {
		if x.Start.Pid == r.Start.Pid && x.Start.At == r.Start.At {
			return x
		}
	}
	return r
}

// tickOf is a run's tick, as TICKD_TICK gave it.
func tickOf(t *testing.T, r tickdtest.Run) time.Time {
	t.Helper()
	T, err := time.Parse(time.RFC3339, r.Start.Tick)
	if err != nil {
		t.Fatalf("run %+v: its tick: %v", r.Start, err)
	}
	return T
}

// TestReplaceStopsEveryKindOfHolder: with on_busy = "replace", every tick
// stops the run it finds and runs in its place: a holder that exits on
// SIGTERM is followed within 1s of its end; one that ignores SIGTERM, and
// one SIGSTOPped, are killed after the grace (lease_ttl/10) and followed
// within 1s of that; a holder whose replica is killed (kill -9) is followed
// once its lease has expired, within one lease_ttl of the tick. No two runs
// of an entity overlap: each one's predecessor has ended, or its process is
// gone, when it starts.
func TestReplaceStopsEveryKindOfHolder(t *testing.T) {
	tier.Full(t, "two replicas for over ten seconds")
	t.Parallel()
	e := newOpsEnv(t, false, replaceTask(`"term", "deaf", "frozen"`))
	procs := replicasAB(t, e, "TESTWORKER_SLOW=term,deaf,frozen", "TESTWORKER_IGNORE_TERM=deaf")
	first := map[string]tickdtest.Run{}
	expect.WaitFor(t, 30*time.Second, "a run of each entity", func() bool {
		for _, r := range tickdtest.ReadRuns(t, e.runs) {
			if _, ok := first[r.Start.Entity]; !ok {
				first[r.Start.Entity] = r
			}
		}
		return len(first) == 3
	})
	if err := syscall.Kill(first["frozen"].Start.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	grace := scheduler.Grace(replaceTTL)
	next := map[string]tickdtest.Run{}
	expect.WaitFor(t, 3*replaceEvery, "a successor of each", func() bool {
		runs := tickdtest.ReadRuns(t, e.runs)
		for id, old := range first {
			if _, ok := next[id]; ok {
				continue
			}
			if r, ok := successorOf(runs, old); ok {
				next[id] = r
				old = sameRun(runs, old)
				first[id] = old // with its end, if it has one now
				// At its start, its predecessor has ended: its end record,
				// or, for a killed one, its process gone.
				expect.True(t, id+": the predecessor ended before its successor started",
					old.End.At != 0 && old.End.At <= r.Start.At || !alive(old.Start.Pid))
			}
		}
		return len(next) == 3
	})
	for id, r := range next {
		expect.Equal(t, id+": the successor's reason", r.Start.Reason, "replaced")
		expect.True(t, id+": a higher fence", r.Start.Fence > first[id].Start.Fence)
		T := tickOf(t, r)
		if id == "term" {
			old := first[id]
			expect.Equal(t, "term: stopped by SIGTERM", old.End.Signal, "terminated")
			d := time.Duration(r.Start.At - old.End.At)
			t.Logf("term: followed %v after its predecessor ended", d.Round(time.Millisecond))
			if d > time.Second {
				t.Errorf("term: successor started %v after its predecessor ended, want within 1s", d)
			}
			continue
		}
		// Killed after the grace: followed within 1s of that.
		expect.Equal(t, id+": no end record (killed)", first[id].End.At, int64(0))
		d := time.Unix(0, r.Start.At).Sub(T)
		t.Logf("%s: followed %v after the tick (grace %v)", id, d.Round(time.Millisecond), grace)
		if d > grace+time.Second {
			t.Errorf("%s: successor started %v after its tick, want within the grace %v and 1s", id, d, grace)
		}
	}

	// Kill -9 the replica that runs term's successor: the next tick finds
	// its lease held, never renewed again, and the run starts when it
	// expires, within one lease_ttl of the tick.
	holder := procs[next["term"].Start.Ppid]
	if holder == nil {
		t.Fatalf("term's successor's parent %d is not a replica", next["term"].Start.Ppid)
	}
	// What the operator sees, before a replica's death takes the parts of
	// the history it had not written yet with it.
	replaceShown(t, e)
	holder.Signal(syscall.SIGKILL)
	var last tickdtest.Run // the killed replica's last run of term
	for _, r := range tickdtest.ReadRuns(t, e.runs) {
		if r.Start.Entity == "term" && r.Start.Ppid == holder.Pid() {
			last = r
		}
	}
	var third tickdtest.Run
	expect.WaitFor(t, 3*replaceTTL, "a run of term after its replica's death", func() bool {
		r, ok := successorOf(tickdtest.ReadRuns(t, e.runs), last)
		third = r
		return ok
	})
	expect.True(t, "the killed replica's run died with it (Pdeathsig)", !alive(last.Start.Pid))
	// Every tick is shorter than the lease: the next one found it held,
	// and the run it left waited for the lease to expire.
	expect.Equal(t, "term: the reason of the run after the killed replica's", third.Start.Reason, "replaced")
	T := tickOf(t, third)
	d := time.Unix(0, third.Start.At).Sub(T)
	t.Logf("the killed replica's run followed %v after the tick that replaced it (lease_ttl %v)", d.Round(time.Millisecond), replaceTTL)
	if d > replaceTTL+time.Second {
		t.Errorf("term: successor of the killed replica's run started %v after its tick, want within lease_ttl %v and 1s", d, replaceTTL)
	}
	expect.True(t, "a higher fence", third.Start.Fence > last.Start.Fence)
}

// replaceShown: tickd history -json counts the runs replaced (outcome
// replaced) and the entities a tick found busy and replaced (skipped
// replacing), and tickd status -json shows a last run replaced and one
// with reason replaced.
func replaceShown(t *testing.T, e *opsEnv) {
	t.Helper()
	// A replica writes a tick's part as its runs end, within a second or
	// so: waited for.
	outcomes, skipped := 0, 0
	if !expect.Within(10*time.Second, func() bool {
		outcomes, skipped = 0, 0
		for _, tk := range e.history(e.cfg, "hung").Ticks {
			outcomes += tk.Outcomes[string(driver.OutcomeReplaced)]
			skipped += tk.Skipped["replacing"]
		}
		return outcomes > 0 && skipped > 0
	}) {
		t.Errorf("the history counts runs replaced (%d) and entities replacing (%d), want both", outcomes, skipped)
	}
	var replaced, replacing bool
	for _, r := range e.status("hung").LastRuns {
		replaced = replaced || r.Outcome == string(driver.OutcomeReplaced)
		replacing = replacing || r.Reason == string(driver.ReasonReplaced)
	}
	expect.True(t, fmt.Sprintf("status shows a run replaced (%v) and a replacing one (%v)", replaced, replacing), replaced || replacing)
}

// TestReplaceOfAFrozenReplicasRun: with on_busy = "replace", the replica
// that holds a run is frozen (SIGSTOP) while its run, a process of its
// own, goes on. The next tick replaces it: the successor starts on the
// other replica once the lease has expired, with a higher fence, and
// writes through the fence guards (a Postgres, a Redis and an HTTP
// service of their own). The old run then ends and writes, late: each
// guard refuses it, and what they kept is in fence order.
func TestReplaceOfAFrozenReplicasRun(t *testing.T) {
	tier.Full(t, "two replicas for over ten seconds")
	t.Parallel()
	e := newOpsEnv(t, false, replaceTask(`"w"`))
	pg := pgtest.Start(t)
	sink := tickdtest.FenceSink(t, pg.DSN(), redistest.Start(t).Addr)
	procs := replicasAB(t, e, append([]string{"TESTWORKER_SLOW=w"}, sink.Env()...)...)
	var old tickdtest.Run
	expect.WaitFor(t, 30*time.Second, "w's first run", func() bool {
		runs := tickdtest.ReadRuns(t, e.runs)
		if len(runs) > 0 {
			old = runs[0]
		}
		return len(runs) > 0
	})
	holder := procs[old.Start.Ppid]
	if holder == nil {
		t.Fatalf("w's run's parent %d is not a replica", old.Start.Ppid)
	}
	holder.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { holder.Signal(syscall.SIGCONT) })
	var next tickdtest.Run
	expect.WaitFor(t, 3*replaceTTL, "w's successor", func() bool {
		r, ok := successorOf(tickdtest.ReadRuns(t, e.runs), old)
		next = r
		return ok
	})
	expect.Equal(t, "the successor's reason", next.Start.Reason, "replaced")
	expect.True(t, "the successor's fence is higher", next.Start.Fence > old.Start.Fence)
	expect.True(t, "the old run goes on (its replica frozen)", alive(old.Start.Pid))
	// The old run ends now, after its successor wrote, and writes.
	if err := syscall.Kill(old.Start.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 10*time.Second, "the old run's end", func() bool {
		old = sameRun(tickdtest.ReadRuns(t, e.runs), old)
		return old.End.At != 0
	})
	for _, guard := range []string{"postgres", "redis", "http"} {
		expect.Equal(t, guard+": the successor's write", next.Start.Guards[guard], "accepted")
		expect.Equal(t, guard+": the old run's late write", old.End.Guards[guard], "refused")
	}
	var pgWrites []int64
	for f := range strings.FieldsSeq(pg.Exec(t, "SELECT string_agg(fence::text, ' ' ORDER BY seq) FROM tickd_writes")) {
		n, _ := strconv.ParseInt(f, 10, 64)
		pgWrites = append(pgWrites, n)
	}
	keptInOrder(t, "Postgres", pgWrites, old.Start.Fence, next.Start.Fence)
	keptInOrder(t, "the HTTP service", sink.HTTPLog(t)["hung/w"], old.Start.Fence, next.Start.Fence)
}

// keptInOrder judges the fences of the writes a guard kept: the old run's
// first write, then its successor's, none of the old run's after that, and
// every later write (the successor's end, a later tick's run: a loaded
// machine lets them in before the check) at a fence no lower than the one
// before it.
func keptInOrder(t *testing.T, guard string, writes []int64, old, next int64) {
	t.Helper()
	ok := len(writes) >= 2 && writes[0] == old && writes[1] == next
	for i := 2; ok && i < len(writes); i++ {
		ok = writes[i] >= writes[i-1]
	}
	expect.True(t, fmt.Sprintf("%s's writes: %v, want %d, then %d, then none lower", guard, writes, old, next), ok)
}
