package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// at is 2026-01-01 at h:m UTC.
func at(h, m int) time.Time { return time.Date(2026, 1, 1, h, m, 0, 0, time.UTC) }

// everyMinute is a task every minute, flagged after 3 ticks.
func everyMinute(t *testing.T) *config.Task {
	t.Helper()
	cfg, err := config.Parse("t.toml", []byte("[[tasks]]\nname = \"t\"\nevery = \"1m\"\ncommand = [\"true\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.Tasks[0]
}

// record is a tick's record of one replica's part.
func record(T time.Time, replica string, final bool, outcomes map[driver.Outcome]int) driver.TickRecord {
	started := 0
	for _, n := range outcomes {
		started += n
	}
	return driver.TickRecord{Tick: T, Parts: []driver.TickPart{{Replica: replica, Final: final, Entities: started, Started: started, Outcomes: outcomes}}}
}

var running = []driver.Replica{{ID: "r1", Tasks: []string{"t"}, Since: at(11, 0)}}

func states(views []TickView) string {
	var b strings.Builder
	for _, v := range views {
		b.WriteString(v.Tick.Format("15:04") + " " + v.State + "; ")
	}
	return b.String()
}

// TestAssessStates: each tick's state from its record and the replicas,
// and the ticks the schedule expected without a record: missed, or
// folded into one paused row while a pause held them.
func TestAssessStates(t *testing.T) {
	t.Parallel()
	task := everyMinute(t)
	done := map[driver.Outcome]int{driver.OutcomeDone: 2}
	waiting := record(at(12, 2), "r1", true, done)
	waiting.Parts[0].Skipped = map[string]int{driver.SkipLimited: 1}
	past := Past{Replicas: running, Ticks: []driver.TickRecord{
		record(at(12, 5), "r1", false, nil),   // runs go on, on a replica that is up
		record(at(12, 4), "gone", false, nil), // left unfinished by a replica that is gone
		record(at(12, 3), "r1", true, done),
		waiting,
		record(at(12, 0), "r1", true, done),
	}}
	views, h := Assess(task, at(12, 5).Add(30*time.Second), past)
	expect.Equal(t, "states", states(views), "12:05 running; 12:04 incomplete; 12:03 complete; 12:02 waiting; 12:01 missed; 12:00 complete; ")
	expect.Equal(t, "health", h, Health{})

	// Paused from 12:01 to 12:04: one paused row for the ticks it held.
	past = Past{Replicas: running,
		Ticks:   []driver.TickRecord{record(at(12, 5), "r1", true, done), record(at(12, 0), "r1", true, done)},
		Actions: []driver.Action{{What: driver.ActionResume, At: at(12, 4).Add(30 * time.Second)}, {What: driver.ActionPause, At: at(12, 0).Add(30 * time.Second), By: "ops"}},
	}
	views, _ = Assess(task, at(12, 5).Add(30*time.Second), past)
	expect.Equal(t, "states with a pause", states(views), "12:05 complete; 12:01 paused; 12:00 complete; ")
	expect.Equal(t, "the paused row's pause", views[1].Pause.By, "ops")
}

// TestAssessHealth: the flags a task's history raises, and why.
func TestAssessHealth(t *testing.T) {
	t.Parallel()
	task := everyMinute(t)
	failed := map[driver.Outcome]int{driver.OutcomeFailed: 2}
	ticks := func(outcomes map[driver.Outcome]int) []driver.TickRecord {
		var rs []driver.TickRecord
		for m := 5; m >= 0; m-- {
			rs = append(rs, record(at(12, m), "r1", true, outcomes))
		}
		return rs
	}
	now := at(12, 5).Add(30 * time.Second)
	for _, c := range []struct {
		name     string
		past     Past
		now      time.Time
		flags    string
		notFired string // a part of NotFiring
	}{
		{"healthy", Past{Replicas: running, Ticks: ticks(map[driver.Outcome]int{driver.OutcomeDone: 1})}, now, "", ""},
		{"every run of the last 3 ticks failed", Past{Replicas: running, Ticks: ticks(failed)}, now, "failing", ""},
		{"the last 3 ticks ran nothing", Past{Replicas: running, Ticks: ticks(nil)}, now, "starved", ""},
		{"no replica", Past{Ticks: ticks(map[driver.Outcome]int{driver.OutcomeDone: 1})}, now, "not_firing", "no replica is running"},
		{"no replica runs it", Past{Replicas: []driver.Replica{{ID: "r1", Since: at(11, 0)}}, Ticks: ticks(map[driver.Outcome]int{driver.OutcomeDone: 1})}, now, "not_firing", "do not have it"},
		{"no record for a while", Past{Replicas: running, Ticks: ticks(map[driver.Outcome]int{driver.OutcomeDone: 1})}, at(12, 30), "not_firing", "no record of the tick at 2026-01-01T12:06:00Z"},
		{"paused: not flagged", Past{Replicas: running, Paused: true, Ticks: ticks(map[driver.Outcome]int{driver.OutcomeDone: 1})}, at(12, 30), "", ""},
	} {
		_, h := Assess(task, c.now, c.past)
		expect.Equal(t, c.name+": flags", strings.Join(h.Flags(), ","), c.flags)
		expect.True(t, c.name+": why not firing: "+h.NotFiring, strings.Contains(h.NotFiring, c.notFired))
	}
}

// TestReasonForEveryTick: a tick that ran is on time or late by its first
// start; one that ran nothing says why; a record with nothing to say why
// has no reason (the checkers count it unaccounted).
func TestReasonForEveryTick(t *testing.T) {
	t.Parallel()
	done := map[driver.Outcome]int{driver.OutcomeDone: 2}
	ran := func(first time.Duration) TickView {
		r := record(at(12, 0), "r1", true, done)
		r.Parts[0].FirstStart = first
		return TickView{TickRecord: r, State: TickComplete}
	}
	skipped := func(sk map[string]int) TickView {
		r := record(at(12, 0), "r1", true, nil)
		r.Parts[0].Entities, r.Parts[0].Skipped = 3, sk
		return TickView{TickRecord: r, State: TickComplete}
	}
	failedSource := skipped(nil)
	failedSource.Parts[0].SourceFailed = true
	for _, c := range []struct {
		v    TickView
		want string
	}{
		{ran(200 * time.Millisecond), "on time"},
		{ran(2100 * time.Millisecond), "late by 2.1s"},
		{skipped(map[string]int{SkipQuarantined: 2, SkipBusy: 1}), "quarantined"},
		{skipped(map[string]int{SkipNotAcknowledged: 3}), "not acknowledged"},
		{failedSource, "source failed"},
		{TickView{TickRecord: record(at(12, 0), "r1", true, nil), State: TickComplete}, "no entities"},
		{TickView{TickRecord: driver.TickRecord{Tick: at(12, 0)}, State: TickMissed}, "missed"},
		{TickView{TickRecord: record(at(12, 0), "r1", true, done), State: TickWaiting}, "limited"},
		{skipped(nil), ""},
	} {
		expect.Equal(t, fmt.Sprintf("the reason of %+v", c.v.Parts), Reason(c.v), c.want)
	}
}

// TestSummaryNamesWhatWentWrong: a heartbeat's end names the replica that
// left an incomplete tick unfinished, and the entities whose runs failed
// (at most max, then how many more), each quoted.
func TestSummaryNamesWhatWentWrong(t *testing.T) {
	T := at(9, 0)
	r := driver.TickRecord{Tick: T, Parts: []driver.TickPart{
		{Replica: "r1", Final: true, Entities: 3, Started: 1, Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 1}},
		{Replica: "r2", Final: false, Entities: 3, Started: 2},
		{Replica: "r3", Final: false, Entities: 3, Started: 0}, // live: its part goes on
	}}
	ok, text := Summary("sync", r, TickIncomplete, map[string]bool{"r1": true, "r3": true})
	expect.True(t, "not ok: "+text, !ok)
	expect.True(t, "names r2: "+text, strings.Contains(text, "unfinished: the part of r2, gone with its runs"))
	fs := []driver.Failure{{Entity: "a", Tick: T}, {Entity: "b\n", Tick: T}, {Entity: "a", Tick: T}, {Entity: "c", Tick: T.Add(time.Minute)}, {Entity: "d", Tick: T}}
	expect.Equal(t, "failed entities", FailedEntities(fs, T, 2), `failed: "a", "b\n" and 1 more (tickd history -failures)`+"\n")
	expect.Equal(t, "none of the tick", FailedEntities(fs, T.Add(time.Hour), 2), "")
}

// TestNoMissedRowsFromAnOlderSchedule: after a reload changed the schedule
// (every 45s, then every minute), the current schedule's ticks between the
// older schedule's records are not shown as missed; one missed under the
// current schedule still is.
func TestNoMissedRowsFromAnOlderSchedule(t *testing.T) {
	t.Parallel()
	task := everyMinute(t)
	done := map[driver.Outcome]int{driver.OutcomeDone: 1}
	s := func(h, m, sec int) time.Time { return at(h, m).Add(time.Duration(sec) * time.Second) }
	past := Past{Replicas: running, Ticks: []driver.TickRecord{
		record(at(12, 10), "r1", true, done),
		record(at(12, 8), "r1", true, done), // 12:09 missed, under the current schedule
		record(s(12, 7, 30), "r1", true, done),
		record(s(12, 6, 45), "r1", true, done),
		record(at(12, 6), "r1", true, done),
		record(s(12, 5, 15), "r1", true, done),
		record(s(12, 4, 30), "r1", true, done),
	}}
	views, _ := Assess(task, s(12, 10, 30), past)
	expect.Equal(t, "states", states(views), "12:10 complete; 12:09 missed; 12:08 complete; 12:07 complete; 12:06 complete; 12:06 complete; 12:05 complete; 12:04 complete; ")
}
