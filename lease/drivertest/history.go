package drivertest

import (
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// testTickRecords: each replica's part of a tick lands in the tick's one
// record, over its own earlier part; records come newest first, whatever
// order the ticks were written in.
func testTickRecords(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	now := time.Now().Truncate(time.Millisecond)
	t1, t2 := now.Add(-2*time.Minute), now.Add(-time.Minute)
	part := func(replica string, final bool, started int, outcomes map[driver.Outcome]int, skipped map[string]int) driver.TickPart {
		return driver.TickPart{Replica: replica, Final: final, Written: now, Entities: 10, Started: started, Outcomes: outcomes,
			Skipped: skipped, FirstStart: 3 * time.Millisecond, LastEnd: time.Duration(started) * time.Second}
	}
	write := func(task string, tick time.Time, p driver.TickPart) {
		t.Helper()
		if err := s.Fleet().RecordTicks(bg, []driver.TickWrite{{Task: task, Tick: tick, Part: p, Keep: driver.DefaultHistory()}}); err != nil {
			t.Fatal(err)
		}
	}
	write("t", t2, part("A", false, 4, nil, map[string]int{driver.SkipAlreadyRan: 6}))
	write("t", t1, part(hostile, true, 10, map[driver.Outcome]int{driver.OutcomeDone: 9, driver.OutcomeFailed: 1}, nil))
	write("t", t2, part("B", true, 6, map[driver.Outcome]int{driver.OutcomeDone: 6}, map[string]int{driver.SkipAlreadyRan: 4}))
	write("t", t2, part("A", true, 4, map[driver.Outcome]int{driver.OutcomeDone: 3, driver.OutcomeTimeout: 1}, map[string]int{driver.SkipAlreadyRan: 6}))
	rs, err := s.Fleet().Ticks(bg, "t", 10)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "records", len(rs), 2)
	r := rs[0]
	expect.True(t, "newest first", r.Tick.Equal(t2))
	expect.Same(t, "replicas of t2", r.Replicas(), []string{"A", "B"})
	expect.Equal(t, "runs of t2", r.Runs(), 10)
	expect.Same(t, "outcomes of t2", r.Outcomes(), map[driver.Outcome]int{driver.OutcomeDone: 9, driver.OutcomeTimeout: 1})
	expect.Same(t, "skips of t2 (the replicas ran every entity)", r.Skipped(), map[string]int{})
	expect.True(t, "t2 final", r.Final())
	expect.Equal(t, "t2's first start", r.FirstStart(), 3*time.Millisecond)
	expect.Equal(t, "t2's last end", r.LastEnd(), 6*time.Second)
	expect.Same(t, "t1's replica (hostile id)", rs[1].Replicas(), []string{hostile})
	expect.Same(t, "t1's outcomes", rs[1].Outcomes(), map[driver.Outcome]int{driver.OutcomeDone: 9, driver.OutcomeFailed: 1})
	expect.Equal(t, "another task's records", len(mustTicks(t, s, "other")), 0)

	// A part written before its run ended, left so (the replica died).
	write("t", now, part("C", false, 2, map[driver.Outcome]int{driver.OutcomeDone: 1}, nil))
	expect.True(t, "a part not final leaves its tick not final", !mustTicks(t, s, "t")[0].Final())

	// Two processes of one replica id, one after the other in a tick (a
	// restart under a fixed replica_id): each keeps its part, the later
	// does not replace the earlier's runs.
	t3 := now.Add(time.Minute)
	before, after := part("D", true, 5, map[driver.Outcome]int{driver.OutcomeDone: 5}, nil), part("D", true, 0, nil, map[string]int{driver.SkipAlreadyRan: 5})
	before.Process, after.Process = "p1", "p2"
	write("t", t3, before)
	write("t", t3, after)
	r = mustTicks(t, s, "t")[0]
	expect.Equal(t, "runs of a tick two processes of D took part in", r.Runs(), 5)
	expect.Same(t, "its replicas", r.Replicas(), []string{"D"})
}
func mustTicks(t *testing.T, s *lease.Store, task string) []driver.TickRecord {
	t.Helper()
	rs, err := s.Fleet().Ticks(bg, task, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// testHistoryRetention: the records are cut by count and by age in the
// write, and a part for a tick older than the newest driver.TickScan is dropped.
func testHistoryRetention(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	now := time.Now().Truncate(time.Millisecond)
	keep := driver.Retention{Ticks: 5, Age: time.Hour, Failures: 3, Actions: 2}
	var ws []driver.TickWrite
	for i := range 8 {
		ws = append(ws, driver.TickWrite{Task: "t", Tick: now.Add(time.Duration(i-8) * time.Minute),
			Part: driver.TickPart{Replica: "A", Final: true, Written: now, Started: i}, Keep: keep})
	}
	if err := s.Fleet().RecordTicks(bg, ws); err != nil {
		t.Fatal(err)
	}
	rs := mustTicks(t, s, "t")
	expect.Equal(t, "records kept", len(rs), 5)
	expect.Equal(t, "the newest kept", rs[0].Runs(), 7)
	expect.Equal(t, "the oldest kept", rs[4].Runs(), 3)
	// A part that is written two hours on drops every record older than an hour.
	later := driver.TickWrite{Task: "t", Tick: now.Add(2 * time.Hour), Part: driver.TickPart{Replica: "A", Written: now.Add(2 * time.Hour)}, Keep: keep}
	if err := s.Fleet().RecordTicks(bg, []driver.TickWrite{later}); err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "records after an hour", len(mustTicks(t, s, "t")), 1)

	// A part for a tick older than the driver.TickScan newest records is dropped.
	keep.Ticks, keep.Age = 100, 24*time.Hour
	ws = ws[:0]
	for i := range driver.TickScan {
		ws = append(ws, driver.TickWrite{Task: "u", Tick: now.Add(time.Duration(i) * time.Second), Part: driver.TickPart{Replica: "A", Written: now}, Keep: keep})
	}
	ws = append(ws, driver.TickWrite{Task: "u", Tick: now.Add(-time.Second), Part: driver.TickPart{Replica: "A", Written: now}, Keep: keep})
	if err := s.Fleet().RecordTicks(bg, ws); err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "records after a late part", len(mustTicks(t, s, "u")), driver.TickScan)

	var fs []driver.Failure
	for i := range 5 {
		fs = append(fs, driver.Failure{Task: "t", Entity: strings.Repeat("e", i+1), Outcome: driver.OutcomeFailed})
	}
	if err := s.Fleet().RecordFailures(bg, fs, func(string) driver.Retention { return keep }); err != nil {
		t.Fatal(err)
	}
	got, err := s.Fleet().Failures(bg, "t", 10)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "failures kept", len(got), 3)
	expect.Equal(t, "the newest failure first", got[0].Entity, "eeeee")
	for i := range 3 {
		if err := s.Fleet().RecordAction(bg, driver.Action{Task: "t", What: "trigger", By: strings.Repeat("o", i+1)}, keep); err != nil {
			t.Fatal(err)
		}
	}
	as, err := s.Fleet().Actions(bg, "t", 10)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "actions kept", len(as), 2)
	expect.Equal(t, "the newest action first", as[0].By, "ooo")
}

// testFailuresAndActions: what a failure and an action keep comes back as it
// was, hostile text included; an entity's last run keeps its error.
func testFailuresAndActions(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	tick := time.Now().Truncate(time.Second).UTC()
	f := driver.Failure{Task: "t", Entity: hostile, Tick: tick, Reason: driver.ReasonTick, Fence: 42, Replica: "A", Started: tick,
		Ended: tick.Add(time.Second), Outcome: driver.OutcomeFailed, Error: "exit status 3 " + hostile, Output: "line 1\n<script>\n"}
	if err := s.Fleet().RecordFailures(bg, []driver.Failure{f}, func(string) driver.Retention { return driver.DefaultHistory() }); err != nil {
		t.Fatal(err)
	}
	fs, err := s.Fleet().Failures(bg, "t", 10)
	if err != nil {
		t.Fatal(err)
	}
	expect.Same(t, "failures", fs, []driver.Failure{f})
	a := driver.Action{Task: "t", At: tick, By: "ops@host", What: "pause", Reason: hostile, Until: tick.Add(time.Hour)}
	global := driver.Action{At: tick, By: "ops@host", What: "migrate", Detail: "moved 3 keys"}
	for _, a := range []driver.Action{a, global} {
		if err := s.Fleet().RecordAction(bg, a, driver.DefaultHistory()); err != nil {
			t.Fatal(err)
		}
	}
	as, _ := s.Fleet().Actions(bg, "t", 10)
	expect.Same(t, "the task's actions", as, []driver.Action{a})
	as, _ = s.Fleet().Actions(bg, "", 10)
	expect.Same(t, "the fleet's actions: the prefix's and every task's, newest first", as, []driver.Action{global, a})

	l := mustAcquire(t, s, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick})
	long := strings.Repeat("é", driver.MaxRunError)
	if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeFailed, Started: tick, Ended: tick, Error: long}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := s.Fleet().Entity(bg, "t", "e")
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "the last run's error, cut at a rune", st.Last.Error, long[:driver.MaxRunError])
	l = mustAcquire(t, s, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger})
	mustRelease(t, l)
	st, _ = s.Fleet().Entity(bg, "t", "e")
	expect.Equal(t, "a run that did not fail has no error", st.Last.Error, "")
}

// testPauses: a pause keeps who, why and until when, and ends by itself.
func testPauses(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	now := time.Now().Truncate(time.Second).UTC()
	p := driver.PauseInfo{By: "ops", At: now, Reason: hostile, Until: now.Add(time.Hour)}
	if err := s.Fleet().Pause(bg, "t", p); err != nil {
		t.Fatal(err)
	}
	if err := s.Fleet().Pause(bg, "gone", driver.PauseInfo{By: "ops", At: now, Until: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fleet().Pause(bg, "plain", driver.PauseInfo{At: now}); err != nil {
		t.Fatal(err)
	}
	ps, err := s.Fleet().Pauses(bg)
	if err != nil {
		t.Fatal(err)
	}
	expect.Same(t, "the pause's info", ps["t"], p)
	_, ok := ps["gone"]
	expect.True(t, "a pause past its until is over", !ok)
	expect.Same(t, "paused", pausedSet(s), map[string]bool{"t": true, "plain": true})
	if err := s.Fleet().Resume(bg, "t"); err != nil {
		t.Fatal(err)
	}
	expect.Same(t, "paused after a resume", pausedSet(s), map[string]bool{"plain": true})
}

// pausedSet is the set of s's paused tasks.
func pausedSet(s *lease.Store) map[string]bool {
	ps, _ := s.Fleet().Pauses(bg)
	m := map[string]bool{}
	for task := range ps {
		m[task] = true
	}
	return m
}

// testHistories: Histories reads several tasks' ticks and actions at once,
// each task's as Ticks and Actions read it alone, cut to what each read
// asks; a task with no history reads as empty.
func testHistories(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	tick := time.Now().Truncate(time.Second).UTC()
	for _, task := range []string{"a", "b"} {
		for i := range 3 {
			T := tick.Add(time.Duration(i) * time.Minute)
			err := s.Fleet().RecordTicks(bg, []driver.TickWrite{{Task: task, Tick: T, Keep: driver.DefaultHistory(), Part: driver.TickPart{Replica: "A", Final: true, Written: T, Entities: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Fleet().RecordAction(bg, driver.Action{Task: task, At: T, By: task, What: driver.ActionTrigger}, driver.DefaultHistory()); err != nil {
				t.Fatal(err)
			}
		}
	}
	hs, err := s.Fleet().Histories(bg, []driver.HistoryRead{{Task: "a", Ticks: 2, Actions: 1}, {Task: "none", Ticks: 5, Actions: 5}, {Task: "b", Ticks: 5, Actions: 5}})
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "one history a read", len(hs), 3)
	if len(hs) != 3 {
		return
	}
	for i, r := range []driver.HistoryRead{{Task: "a", Ticks: 2, Actions: 1}, {Task: "none", Ticks: 5, Actions: 5}, {Task: "b", Ticks: 5, Actions: 5}} {
		ticks, _ := s.Fleet().Ticks(bg, r.Task, r.Ticks)
		actions, _ := s.Fleet().Actions(bg, r.Task, r.Actions)
		expect.Same(t, r.Task+"'s ticks", hs[i].Ticks, ticks)
		expect.Same(t, r.Task+"'s actions", hs[i].Actions, actions)
	}
	expect.Equal(t, "a's ticks, cut to 2", len(hs[0].Ticks), 2)
	expect.Equal(t, "b's newest tick first", hs[2].Ticks[0].Tick.Equal(tick.Add(2*time.Minute)), true)
}
