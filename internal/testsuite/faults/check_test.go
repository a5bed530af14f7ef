package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"

	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// The checker judges every fault scenario, so it has tests of its own: runs
// written as the worker writes them, for three ticks of every entity, with
// one thing changed per case, and the figures that change asserted.

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) // a multiple of every

// tickAt is the n-th tick after t0.
func tickAt(n int) time.Time { return t0.Add(time.Duration(n) * every) }

// synthRun is one run as the worker records it: started at from, ended at
// to (zero: never ended), under a lease granted at granted (its fence).
type synthRun struct {
	entity, reason string
	tick           time.Time
	granted        time.Time
	from, to       time.Time
	pid, ppid      int
}

// steady is a tick run of every entity at each of ticks 1..3, 10ms after
// the tick, 90ms long.
func steady() []synthRun {
	var rs []synthRun
	pid := 1000
	for n := 1; n <= 3; n++ {
		T := tickAt(n)
		for i := range nEntities {
			pid++
			rs = append(rs, synthRun{entity: fmt.Sprint("e", i), reason: "tick", tick: T, granted: T.Add(5 * time.Millisecond),
				from: T.Add(10 * time.Millisecond), to: T.Add(100 * time.Millisecond), pid: pid, ppid: 1 + pid%3})
		}
	}
	return rs
}

// without drops the run of entity for tick n.
func without(rs []synthRun, entity string, n int) []synthRun {
	return slices.DeleteFunc(rs, func(r synthRun) bool { return r.entity == entity && r.tick.Equal(tickAt(n)) })
}

// checkOf runs the checker over rs for ticks 1..3; setup adds the faults.
func checkOf(t *testing.T, rs []synthRun, setup func(c *cluster)) result {
	t.Helper()
	c := &cluster{t: t, ttl: leaseTTL, runsLog: filepath.Join(t.TempDir(), "runs.log"), killedAt: map[int]int64{}, linger: map[int]interval{}}
	var lines []byte
	for _, r := range rs {
		rec := tickdtest.Record{Event: "start", Task: "sync", Entity: r.entity, Tick: r.tick.UTC().Format(time.RFC3339),
			Reason: r.reason, Fence: r.granted.UnixMicro(), Pid: r.pid, Ppid: r.ppid, At: r.from.UnixNano()}
		for _, ev := range []string{"start", "end"} {
			if ev == "end" {
				if r.to.IsZero() {
					break
				}
				rec.Event, rec.At = "end", r.to.UnixNano()
			}
			b, _ := json.Marshal(rec)
			lines = append(append(lines, b...), '\n')
		}
	}
	if err := os.WriteFile(c.runsLog, lines, 0o644); err != nil {
		expect.Fatalf(t, "%v", err)
	}
	if setup != nil {
		setup(c)
	}
	// Ticks 1..3 are judged: begin+every <= T <= end-2*every.
	return c.check(t0, tickAt(5))
}

func TestChecker(t *testing.T) {
	e5 := func(n int) string { return "e5@" + tickAt(n).UTC().Format(time.RFC3339) }
	all := 3 * nEntities
	cases := []struct {
		name  string
		runs  []synthRun
		setup func(c *cluster)
		// the figures that matter in this case
		eligible, ran, withoutRedis, overlaps, stopped int
		missed                                         []string
	}{
		{name: "every entity ran every tick", runs: steady(), eligible: all, ran: all},
		{name: "a missed tick", runs: without(steady(), "e5", 2), eligible: all, ran: all - 1, missed: []string{e5(2)}},
		{
			name: "busy: a run of another reason holds the lease across the tick",
			runs: append(without(steady(), "e5", 2), synthRun{entity: "e5", reason: "reschedule", tick: tickAt(1),
				granted: tickAt(2).Add(-300 * time.Millisecond), from: tickAt(2).Add(-290 * time.Millisecond), to: tickAt(2).Add(500 * time.Millisecond), pid: 1, ppid: 1}),
			eligible: all - 1, ran: all - 1,
		},
		{
			name: "a tick run counts though another run held the lease at the tick",
			runs: append(without(steady(), "e5", 2),
				synthRun{entity: "e5", reason: "reschedule", tick: tickAt(1),
					granted: tickAt(2).Add(-300 * time.Millisecond), from: tickAt(2).Add(-290 * time.Millisecond), to: tickAt(2).Add(500 * time.Millisecond), pid: 1, ppid: 1},
				synthRun{entity: "e5", reason: "tick", tick: tickAt(2),
					granted: tickAt(2).Add(600 * time.Millisecond), from: tickAt(2).Add(610 * time.Millisecond), to: tickAt(2).Add(700 * time.Millisecond), pid: 2, ppid: 1}),
			eligible: all, ran: all,
		},
		{
			// The tick reached e5 late, while tick 1's late run held it.
			name: "busy: a replica skipped the entity while another run held the lease",
			runs: append(without(without(steady(), "e5", 2), "e5", 1), synthRun{entity: "e5", reason: "tick", tick: tickAt(1),
				granted: tickAt(2).Add(1200 * time.Millisecond), from: tickAt(2).Add(1210 * time.Millisecond), to: tickAt(2).Add(1900 * time.Millisecond), pid: 1, ppid: 1}),
			setup: func(c *cluster) {
				c.skipped = map[string][]time.Time{"sync/" + e5(2): {tickAt(2).Add(1500 * time.Millisecond)}}
			},
			eligible: all - 1, ran: all - 1,
		},
		{
			name: "… a skip while no run held it is a miss",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				c.skipped = map[string][]time.Time{"sync/" + e5(2): {tickAt(2).Add(800 * time.Millisecond)}}
			},
			eligible: all, ran: all - 1, missed: []string{e5(2)},
		},
		{
			// A loaded replica released tick 1's lease 1.9s after its run's
			// end: the skip while it was held is no miss.
			name: "busy: a replica skipped the entity before the last run's lease was released",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				c.skipped = map[string][]time.Time{"sync/" + e5(2): {tickAt(2).Add(800 * time.Millisecond)}}
				c.logged = map[tickdtest.RunID]tickdtest.LoggedEnd{{Task: "sync", Entity: "e5", Fence: tickAt(1).Add(5 * time.Millisecond).UnixMicro()}: {Took: 90 * time.Millisecond, Released: tickAt(2).UnixNano()}}
			},
			eligible: all - 1, ran: all - 1,
		},
		{
			// Tick 1's run of e5 ended 90ms after its start, and its
			// release landed 3s later (a loaded replica, a Cluster under
			// the nemesis): tick 2's skip names its fence.
			name: "busy: a replica skipped the entity while Redis said the last run's lease held",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				at := tickAt(2).Add(800 * time.Millisecond)
				c.skipped = map[string][]time.Time{"sync/" + e5(2): {at}}
				c.busyHeld = map[string][]heldSkip{"sync/" + e5(2): {{at, tickAt(1).Add(5 * time.Millisecond).UnixMicro()}}}
			},
			eligible: all - 1, ran: all - 1,
		},
		{
			name: "… a skip naming a fence no run of the entity had is a miss",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				at := tickAt(2).Add(800 * time.Millisecond)
				c.skipped = map[string][]time.Time{"sync/" + e5(2): {at}}
				c.busyHeld = map[string][]heldSkip{"sync/" + e5(2): {{at, 42}}}
			},
			eligible: all, ran: all - 1, missed: []string{e5(2)},
		},
		{
			// Tick 3's fan-out reached e5 before tick 2's: tick 2's then
			// found a later tick started, and stood down.
			name: "superseded: a late tick found a later tick's run started",
			runs: append(without(without(steady(), "e5", 2), "e5", 3), synthRun{entity: "e5", reason: "tick", tick: tickAt(3),
				granted: tickAt(3).Add(5 * time.Millisecond), from: tickAt(3).Add(10 * time.Millisecond), to: tickAt(3).Add(100 * time.Millisecond), pid: 1, ppid: 1}),
			setup: func(c *cluster) {
				c.superseded = map[string][]time.Time{"sync/" + e5(2): {tickAt(3).Add(200 * time.Millisecond)}}
			},
			eligible: all - 1, ran: all - 1,
		},
		{
			name: "… already ran with no later run started is a miss",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				c.superseded = map[string][]time.Time{"sync/" + e5(2): {tickAt(2).Add(200 * time.Millisecond)}}
			},
			eligible: all, ran: all - 1, missed: []string{e5(2)},
		},
		{
			// Tick 2's run of e5 waited for a limit, and a queued
			// follow-up of tick 1 took its one waiting place (documented
			// as superseded); that run started 4s later.
			name: "superseded: another run took the waiting run's place, and ran",
			runs: append(without(steady(), "e5", 2), synthRun{entity: "e5", reason: "queued", tick: tickAt(1),
				granted: tickAt(2).Add(4500 * time.Millisecond), from: tickAt(2).Add(4510 * time.Millisecond), to: tickAt(2).Add(4600 * time.Millisecond), pid: 1, ppid: 1}),
			setup: func(c *cluster) {
				at := []time.Time{tickAt(2).Add(500 * time.Millisecond)}
				c.superseded = map[string][]time.Time{"sync/" + e5(2): at}
				c.tookPlace = map[string][]time.Time{"sync/" + e5(2): at}
			},
			eligible: all - 1, ran: all - 1,
		},
		{
			name: "… and a place taken by a run that never came is a miss",
			runs: without(without(steady(), "e5", 2), "e5", 3),
			setup: func(c *cluster) {
				at := []time.Time{tickAt(2).Add(500 * time.Millisecond)}
				c.superseded = map[string][]time.Time{"sync/" + e5(2): at}
				c.tookPlace = map[string][]time.Time{"sync/" + e5(2): at}
			},
			eligible: all, ran: all - 2, missed: []string{e5(2), e5(3)},
		},
		{
			// A hand-over that met the entity busy became its follow-up.
			name: "a follow-up carrying the tick is the tick's run",
			runs: append(without(steady(), "e5", 2), synthRun{entity: "e5", reason: "queued", tick: tickAt(2),
				granted: tickAt(2).Add(time.Second), from: tickAt(2).Add(time.Second), to: tickAt(2).Add(1100 * time.Millisecond), pid: 1, ppid: 1}),
			eligible: all, ran: all,
		},
		{
			name: "a hand-over (a retry carrying the tick) is the tick's run",
			runs: append(without(steady(), "e5", 2), synthRun{entity: "e5", reason: "retry", tick: tickAt(2),
				granted: tickAt(2).Add(time.Second), from: tickAt(2).Add(time.Second), to: tickAt(2).Add(1100 * time.Millisecond), pid: 1, ppid: 1}),
			eligible: all, ran: all,
		},
		{
			// A tick's window is [T-leaseTTL, T+every]: this blackout meets
			// tick 1's alone.
			name: "a blackout excuses the ticks whose window it meets",
			runs: without(steady(), "e5", 1),
			setup: func(c *cluster) {
				c.blackouts = []interval{{t0.Add(500 * time.Millisecond), t0.Add(time.Second)}}
			},
			eligible: all - nEntities, ran: all - nEntities,
		},
		{
			name: "… and only those",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				c.blackouts = []interval{{t0.Add(500 * time.Millisecond), t0.Add(time.Second)}}
			},
			eligible: all - nEntities, ran: all - nEntities - 1, missed: []string{e5(2)},
		},
		{
			name: "runs granted while Redis was down",
			runs: steady(),
			setup: func(c *cluster) {
				c.redisDown = []interval{{tickAt(2).Add(-100 * time.Millisecond), tickAt(2).Add(time.Second)}}
			},
			eligible: all, ran: all, withoutRedis: nEntities,
		},
		{
			name: "a run started during an outage on a lease granted before it, still trusted",
			runs: append(without(steady(), "e5", 2), synthRun{entity: "e5", reason: "tick", tick: tickAt(2),
				granted: tickAt(2).Add(-50 * time.Millisecond), from: tickAt(2).Add(200 * time.Millisecond), to: tickAt(2).Add(300 * time.Millisecond), pid: 1, ppid: 1}),
			setup: func(c *cluster) {
				c.redisDown = []interval{{tickAt(2).Add(100 * time.Millisecond), tickAt(2).Add(time.Second)}}
			},
			eligible: all, ran: all,
		},
		{
			// On a loaded machine a run's process starts seconds after its
			// grant, its lease renewed meanwhile: granted 1.2s before the
			// outage, renewed until it, it starts 2.1s after its grant (a 1s
			// lease), within what the last renewal held.
			name: "a run started during an outage on a lease granted long before it, renewed until it",
			runs: append(without(steady(), "e5", 2), synthRun{entity: "e5", reason: "tick", tick: tickAt(2),
				granted: tickAt(2).Add(-1200 * time.Millisecond), from: tickAt(2).Add(900 * time.Millisecond), to: tickAt(2).Add(1000 * time.Millisecond), pid: 1, ppid: 1}),
			setup: func(c *cluster) {
				c.ttl = time.Second
				c.redisDown = []interval{{tickAt(2).Add(100 * time.Millisecond), tickAt(2).Add(1900 * time.Millisecond)}}
			},
			eligible: all, ran: all,
		},
		{
			name: "… and after any lease it had could have lapsed",
			runs: append(without(steady(), "e5", 2), synthRun{entity: "e5", reason: "tick", tick: tickAt(2),
				granted: tickAt(2).Add(-50 * time.Millisecond), from: tickAt(2).Add(1500 * time.Millisecond), to: tickAt(2).Add(1600 * time.Millisecond), pid: 1, ppid: 1}),
			setup: func(c *cluster) {
				c.ttl = time.Second
				c.redisDown = []interval{{tickAt(2).Add(100 * time.Millisecond), tickAt(2).Add(1900 * time.Millisecond)}}
			},
			eligible: all, ran: all, withoutRedis: 1,
		},
		{
			name: "a killed replica's run is open until the kill, and busy until then",
			runs: append(without(without(steady(), "e5", 2), "e5", 1), synthRun{entity: "e5", reason: "tick", tick: tickAt(1),
				granted: tickAt(1), from: tickAt(1).Add(10 * time.Millisecond), pid: 1, ppid: 7}),
			setup:    func(c *cluster) { c.killedAt[7] = tickAt(2).Add(300 * time.Millisecond).UnixNano() },
			eligible: all - 1, ran: all - 1,
		},
		{
			// Its replica lived on, to be killed -9 a tick later.
			name: "a run SIGKILLed after its grace ended at that, not at its replica's later kill",
			runs: append(without(without(steady(), "e5", 2), "e5", 1),
				synthRun{entity: "e5", reason: "tick", tick: tickAt(1), granted: tickAt(1), from: tickAt(1).Add(10 * time.Millisecond), pid: 1, ppid: 7},
				synthRun{entity: "e5", reason: "tick", tick: tickAt(2), granted: tickAt(2).Add(400 * time.Millisecond),
					from: tickAt(2).Add(410 * time.Millisecond), to: tickAt(2).Add(500 * time.Millisecond), pid: 2, ppid: 8}),
			setup: func(c *cluster) {
				c.logged = map[tickdtest.RunID]tickdtest.LoggedEnd{{Task: "sync", Entity: "e5", Fence: tickAt(1).UnixMicro()}: {Killed: tickAt(2).Add(300 * time.Millisecond).UnixNano()}}
				c.killedAt[7] = tickAt(3).Add(500 * time.Millisecond).UnixNano()
			},
			eligible: all, ran: all,
		},
		{
			name: "… and its lease, perhaps never released, is busy until it could expire",
			runs: append(without(without(steady(), "e5", 2), "e5", 1),
				synthRun{entity: "e5", reason: "tick", tick: tickAt(1), granted: tickAt(1), from: tickAt(1).Add(10 * time.Millisecond), pid: 1, ppid: 7}),
			setup: func(c *cluster) {
				c.logged = map[tickdtest.RunID]tickdtest.LoggedEnd{{Task: "sync", Entity: "e5", Fence: tickAt(1).UnixMicro()}: {Killed: tickAt(2).Add(-time.Second).UnixNano()}}
			},
			eligible: all - 1, ran: all - 1,
		},
		{
			name: "a lease a killed replica held is busy until it expires",
			runs: without(without(steady(), "e5", 2), "e5", 3),
			setup: func(c *cluster) {
				c.orphaned = []orphans{{entities: map[string]bool{"e5": true}, at: tickAt(2).Add(100 * time.Millisecond)}}
			},
			eligible: all - 2, ran: all - 2,
		},
		{
			name: "a tick run stopped for safety before its worker wrote is excused",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				c.replicaLogs = []string{loggedRun("e5", tickAt(2), "tick", tickAt(2).Add(1200*time.Millisecond), tickAt(2).Add(1900*time.Millisecond),
					"lease_lost", "stopped: lease: not renewed within its trust window")}
			},
			eligible: all - 1, ran: all - 1, stopped: 1,
		},
		{
			name: "… but a run not started is no run: its hand-over is",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				c.replicaLogs = []string{loggedRun("e5", tickAt(2), "tick", tickAt(2).Add(1200*time.Millisecond), tickAt(2).Add(1300*time.Millisecond),
					"lease_lost", "tasks: run not started: lease: not renewed within its trust window")}
			},
			eligible: all, ran: all - 1, missed: []string{e5(2)},
		},
		{
			name: "busy: the lease of a logged run that left no record held across the tick",
			runs: without(steady(), "e5", 2),
			setup: func(c *cluster) {
				c.replicaLogs = []string{loggedRun("e5", tickAt(1), "retry", tickAt(2).Add(-500*time.Millisecond), tickAt(2).Add(300*time.Millisecond),
					"canceled", "tasks: run not started: shutting down")}
			},
			eligible: all - 1, ran: all - 1,
		},
		{
			name: "overlapping runs are counted",
			runs: append(steady(), synthRun{entity: "e5", reason: "trigger", tick: tickAt(2),
				granted: tickAt(2).Add(20 * time.Millisecond), from: tickAt(2).Add(50 * time.Millisecond), to: tickAt(2).Add(60 * time.Millisecond), pid: 1, ppid: 1}),
			eligible: all, ran: all, overlaps: 1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := checkOf(t, c.runs, c.setup)
			for _, fig := range []struct {
				name      string
				got, want int
			}{
				{"eligible (entity, tick) pairs", r.liveEligible, c.eligible},
				{"pairs that ran", r.liveRan, c.ran},
				{"runs without Redis", len(r.withoutRedis), c.withoutRedis},
				{"overlaps", r.Overlaps, c.overlaps},
				{"pairs excused as stopped before their worker wrote", r.stoppedUnrecorded, c.stopped},
			} {
				if fig.got != fig.want {
					t.Errorf("%s: %d, want %d", fig.name, fig.got, fig.want)
				}
			}
			if !slices.Equal(r.missed, c.missed) {
				t.Errorf("missed %v, want %v", r.missed, c.missed)
			}
		})
	}
}

// TestLogLines: the checker reads the lines it needs of a replica's log,
// those of a run of no tick too ("tick":"", a trigger's).
func TestLogLines(t *testing.T) {
	log := `{"time":"2026-11-25T20:10:15Z","level":"INFO","msg":"run ended","task":"sync","tick":"","entity":"e1","fence":7,"reason":"trigger","duration":"502ms"}
{"time":"2026-11-25T20:10:16Z","level":"INFO","msg":"working on e1","task":"sync","tick":"","entity":"e1","fence":7}
{"time":"2026-11-25T20:10:17Z","level":"DEBUG","msg":"entity busy: skipped","task":"sync","entity":"e2","tick":"2026-11-25T20:10:14Z","error":"busy"}
not json, run ended`
	var got []string
	for rec := range tickdtest.LogLines([]string{log}, logs.MsgRunEnded, logs.MsgSkippedBusy) {
		got = append(got, rec.Msg+" "+rec.Entity+" "+rec.Tick)
	}
	want := []string{"run ended e1 ", logs.MsgSkippedBusy + " e2 2026-11-25T20:10:14Z"}
	if !slices.Equal(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
}

// TestClusterChecksBoundOpenRunsByTheLog: on a Cluster, a run whose
// worker wrote its start record and was SIGKILLed before its end record
// (its replica logged the kill) ended at the kill, not at the check: the
// next runs of its entity do not overlap it. CI-like load had a worker
// write its start 6ms before its replica killed it (TestReshardWhileRunning:
// 9 overlaps judged where there was none).
func TestClusterChecksBoundOpenRunsByTheLog(t *testing.T) {
	run := func(fence int64, from, to time.Time, pid int) tickdtest.Run {
		r := tickdtest.Run{Start: tickdtest.Record{Event: "start", Task: "big", Entity: "e54", Reason: "tick", Fence: fence, Pid: pid, At: from.UnixNano()}}
		if !to.IsZero() {
			r.End = tickdtest.Record{Event: "end", Task: "big", Entity: "e54", Fence: fence, Pid: pid, At: to.UnixNano()}
		}
		return r
	}
	runs := []tickdtest.Run{
		run(1, tickAt(1), time.Time{}, 10), // killed: no end record
		run(2, tickAt(2), tickAt(2).Add(time.Second), 11),
		run(3, tickAt(3), tickAt(3).Add(time.Second), 12),
	}
	killed := map[tickdtest.RunID]tickdtest.LoggedEnd{{Task: "big", Entity: "e54", Fence: 1}: {Killed: tickAt(1).Add(6 * time.Millisecond).UnixNano()}}
	if f := tickdtest.Check(runs, tickdtest.OpenEndByLog(killed, tickAt(5))); f.Overlaps != 0 {
		t.Errorf("with the kill logged: %d overlaps, want 0: %v", f.Overlaps, f.Examples)
	}
	if f := tickdtest.Check(runs, tickdtest.OpenEndByLog(nil, tickAt(5))); f.Overlaps != 2 {
		t.Errorf("with nothing logged (open until the check): %d overlaps, want 2", f.Overlaps)
	}
}

// loggedRun is the "run ended" line a replica logs at at of a run of
// entity for tick T granted at granted (its fence).
func loggedRun(entity string, T time.Time, reason string, granted, at time.Time, outcome, errText string) string {
	b, _ := json.Marshal(map[string]any{"time": at, "level": "WARN", "msg": logs.MsgRunEnded, "task": "sync", "entity": entity,
		"tick": T.UTC().Format(time.RFC3339), "fence": granted.UnixMicro(), "reason": reason, "outcome": outcome, "error": errText, "duration": "1s"})
	return string(b)
}
