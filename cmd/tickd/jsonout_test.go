package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/jsoncontract"
	"github.com/tickd/tickd/lease/driver"
)

// checkSchema fails the test when doc breaks the -json contract.
func checkSchema(t testing.TB, doc string) {
	t.Helper()
	for _, e := range jsoncontract.Errors(doc) {
		t.Errorf("-json output: %s\n%s", e, doc)
	}
}

// TestJSONSchema: status's document of a task with every kind of row, and
// of one with none, keeps the contract; the checker itself catches each
// rule broken (status used to print Go field names, TTL in nanoseconds,
// null lists and "0001-01-01T00:00:00Z").
func TestJSONSchema(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	full := report.TaskStatus{Name: "t", Schedule: "every 15m0s", Timezone: "Europe/Berlin", NextTick: now.Add(time.Minute),
		Leases:     []driver.Held{{Task: "t", Entity: "a", Holder: "r1", Since: now.Add(-time.Second), Fence: 7, TTL: 40 * time.Second, Reason: driver.ReasonTick}},
		LastRuns:   []driver.LastRun{{Task: "t", Entity: "b", Outcome: driver.OutcomeUnlocked, Replica: "r1", By: "alice", Started: now.Add(-time.Minute), Ended: now}},
		Due:        []driver.Due{{Task: "t", Entity: "c", Reason: driver.ReasonTrigger, At: now}}, // no tick: null
		LeaseCount: 1, RunCount: 1, DueCount: 1, Paused: true, Pause: driver.PauseInfo{By: "ops", At: now, Reason: "db"},
		Health: history.Health{Starved: true}, LastTick: &history.TickView{State: history.TickMissed, TickRecord: driver.TickRecord{Tick: now}}}
	checkHistorySchema(t, now)
	for name, st := range map[string]report.TaskStatus{"full": full, "empty": {Name: "e", Schedule: "every 1h0m0s", Timezone: "UTC"}} {
		replicas := report.ReplicaDocs(nil)
		if name == "full" {
			replicas = report.ReplicaDocs([]driver.Replica{{ID: "r1", Host: "h", Version: "v", Tasks: []string{"t"}, Since: now, Seen: now},
				{ID: "old", Tasks: nil}}) // a replica of an older tickd: no host, version or start
		}
		limits := []report.LimitDoc{}
		if name == "full" {
			l := report.LimitStatus{Limit: config.Limit{Name: "api", Concurrency: 2, Per: "entity"}}
			l.Closed = map[string]driver.LimitClosing{"shop": {Until: now, Reason: "429"}}
			limits = append(limits, l.Doc())
		}
		backfills := []report.BackfillDoc{}
		if name == "full" { // one going on: no cursor nor end yet (null), every entity ([])
			backfills = append(backfills, report.BackfillDocOf(driver.Backfill{ID: "b1", Task: "t", From: now.Add(-time.Hour), To: now, Total: 5, By: "ops", Created: now}, now))
		}
		b, err := json.Marshal(report.StatusDoc{Replicas: replicas, Tasks: []report.TaskDoc{st.Doc(now)}, Locks: []report.LeaseDoc{}, Limits: limits, Backfills: backfills})
		if err != nil {
			t.Fatal(err)
		}
		checkSchema(t, string(b))
		if name == "full" {
			var back report.StatusDoc
			json.Unmarshal(b, &back) //nolint:errcheck // checked by checkSchema
			r := back.Tasks[0].LastRuns[0]
			if r.By != "alice" || r.Replica != "r1" || r.DurationS != 60 {
				t.Errorf("an unlock's record: by %q, replica %q, duration %v s; want by alice, on its holder r1, 60 s", r.By, r.Replica, r.DurationS)
			}
			if l := back.Tasks[0].Leases[0]; l.TTLLeftS != 40 || l.AgeS != 1 {
				t.Errorf("lease: ttl_left_s %v, age_s %v; want 40 and 1", l.TTLLeftS, l.AgeS)
			}
		}
	}
	for doc, want := range map[string]string{
		`{"Entity": "a"}`:                       "not in snake_case",
		`{"ttl_s": "40s"}`:                      "number of seconds",
		`{"since": "0001-01-01T00:00:00Z"}`:     "RFC 3339 UTC or null",
		`{"tick": "2026-11-22T13:00:00+01:00"}`: "RFC 3339 UTC or null",
		`{"leases": null}`:                      "an empty list is []",
	} {
		if errs := jsoncontract.Errors(doc); len(errs) == 0 || !strings.Contains(strings.Join(errs, ";"), want) {
			t.Errorf("the checker passes %s (errors %v, want one saying %q)", doc, errs, want)
		}
	}
}

// TestStatusColumnsAlignWideCharacters: an entity id in wide characters
// (two columns each on a terminal) or with accents keeps status's columns
// aligned: each row's second column starts at the same terminal column.
func TestStatusColumnsAlignWideCharacters(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	var runs []driver.LastRun
	for _, id := range []string{"plain", "ünïcødé-用户", "用户用户用户"} {
		runs = append(runs, driver.LastRun{Entity: id, Outcome: driver.OutcomeDone, Reason: driver.ReasonTick, Replica: "r1", Started: now, Ended: now})
	}
	var b strings.Builder
	printStatus(&b, []report.TaskStatus{{Name: "t", Schedule: "every 1m0s", Timezone: "UTC", LastRuns: runs, RunCount: len(runs)}}, now)
	col := -1
	for _, line := range strings.Split(b.String(), "\n") {
		i := strings.Index(line, "ENDED")
		if i < 0 {
			i = strings.Index(line, "0s ago")
		}
		if i < 0 {
			continue
		}
		w := runewidth.StringWidth(line[:i])
		if col >= 0 && w != col {
			t.Fatalf("columns misaligned:\n%s", b.String())
		}
		col = w
	}
	if col < 0 {
		t.Fatalf("no rows:\n%s", b.String())
	}
}

// checkHistorySchema: history's document keeps the contract, with every
// kind of row and with none.
func checkHistorySchema(t *testing.T, now time.Time) {
	task := &config.Task{Name: "t"}
	full := report.TaskHistory{Task: task, Health: history.Health{NotFiring: "no replica runs this task"},
		Ticks: []history.TickView{{State: history.TickComplete, TickRecord: driver.TickRecord{Tick: now, Parts: []driver.TickPart{{
			Replica: "r1", Final: true, Written: now, Entities: 3, Started: 2, Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 2},
			Skipped: map[string]int{history.SkipBusy: 1}, FirstStart: time.Millisecond, LastEnd: time.Second}}}},
			{State: history.TickMissed, TickRecord: driver.TickRecord{Tick: now.Add(-time.Minute)}}},
		Failures: []driver.Failure{{Task: "t", Entity: "a", Tick: now, Outcome: driver.OutcomeFailed, Error: "exit status 3"}},
		Actions:  []driver.Action{{Task: "t", At: now, By: "ops", What: "trigger", Entities: []string{"a"}}, {Task: "t", At: now, What: "pause"}}}
	for _, h := range []report.TaskHistory{full, {Task: task}} {
		b, err := json.Marshal(h.Doc())
		if err != nil {
			t.Fatal(err)
		}
		checkSchema(t, string(b))
	}
}
