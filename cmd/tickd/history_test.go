package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
	"github.com/tickd/tickd/lease/driver"
)

func (e *opsEnv) history(cfg, task string) report.HistoryDoc {
	e.t.Helper()
	code, out, errs := cli("history", "-config", cfg, "-json", "-limit", "50", task)
	if code != 0 {
		e.t.Fatalf("history: %d %s", code, errs)
	}
	checkSchema(e.t, out)
	var h report.HistoryDoc
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		e.t.Fatalf("history json %v: %s", err, out)
	}
	return h
}

// TestHistoryAcrossReplicas: three tickd processes share a task whose
// entity e3 fails. Each complete tick's record counts exactly the runs the
// worker recorded, by outcome; the failure keeps its exit status and
// output; a replica killed -9 during a run leaves its tick incomplete; the
// operator's actions are kept with who and why.
func TestHistoryAcrossReplicas(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf(`"e%d"`, i))
	}
	e := newOpsEnv(t, false, `
[[tasks]]
name = "fan"
every = "1s"
entities = [`+strings.Join(ids, ", ")+`]
command = ["sh", "-c", 'WORKER; if [ "$TICKD_ENTITY" = e3 ]; then echo "quota exceeded" >&2; exit 3; fi']
`)
	procs := map[string]*tickdtest.Proc{}
	for _, name := range []string{"A", "B", "C"} {
		procs[name] = tickdtest.Start(t, name, []string{"TESTWORKER_LOG=" + e.runs, "TESTWORKER_MAX_SLEEP=20ms",
			"TESTWORKER_SLOW=e5", "TESTWORKER_SLOW_SLEEP=1h"}, "-config", e.cfg)
	}
	for _, p := range procs {
		p.WaitReady(20 * time.Second)
	}
	// A replica writes its part of a tick within a second or so of its
	// fan-out and runs: the ticks compared are a few report.Seconds old.
	settled := func(tk report.TickDoc) bool {
		return tk.State == "complete" && tk.Runs > 0 && time.Since(tk.Tick.Time()) > 3*time.Second
	}
	var h report.HistoryDoc
	expect.WaitFor(t, 30*time.Second, "three settled complete ticks", func() bool {
		h = e.history(e.cfg, "fan")
		n := 0
		for _, tk := range h.Ticks {
			if settled(tk) {
				n++
			}
		}
		return n >= 3
	})
	checkRecordsMatchTheRuns(t, e, h, settled)
	st := e.status("fan")
	for _, r := range st.LastRuns {
		if r.Entity == "e3" {
			expect.True(t, "status shows e3's error", strings.Contains(r.Error, "exit status 3"))
		}
	}

	// The replica running e5's endless run is killed: its part of that
	// tick stays unfinished, and the tick shows as incomplete.
	heldTick := killHolder(t, e, procs, "e5")
	expect.WaitFor(t, 30*time.Second, "the killed replica's tick incomplete", func() bool { return tickIs(e, heldTick, "incomplete") })

	// Operator actions, with who and why; a pause with an end.
	if code, _, errs := cli("pause", "-config", e.cfg, "-by", "ops", "-reason", "db <migration>", "-for", "1h", "fan"); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := cli("trigger", "-config", e.cfg, "-by", "ops", "fan", "e1"); code != 0 {
		t.Fatal(errs)
	}
	as := e.history(e.cfg, "fan").Actions
	expect.True(t, "two actions, newest first", len(as) == 2 && as[0].Action == "trigger" && as[1].Action == "pause")
	expect.True(t, "the pause's who, why and end", as[1].By == "ops" && as[1].Reason == "db <migration>" &&
		as[1].Until.Time().After(time.Now().Add(50*time.Minute)))
	st = e.status("fan")
	expect.True(t, "status shows the pause", st.Paused && st.Pause.Reason == "db <migration>" && st.Pause.By == "ops")
	expect.Same(t, "a paused task is not flagged not firing", st.Flags, []string{})
}

// tickIs says whether tick T of "fan" is in state, and says so as its
// reason too.
func tickIs(e *opsEnv, T time.Time, state string) bool {
	for _, tk := range e.history(e.cfg, "fan").Ticks {
		if tk.Tick.Time().Equal(T) {
			return tk.State == state && tk.Reason == state
		}
	}
	return false
}

// checkRecordsMatchTheRuns: each settled tick of h counts exactly the runs
// the worker recorded, by outcome (e3 fails).
func checkRecordsMatchTheRuns(t *testing.T, e *opsEnv, h report.HistoryDoc, settled func(report.TickDoc) bool) {
	t.Helper()
	byTick := map[string]map[string]int{}
	for _, r := range tickdtest.ReadRuns(t, e.runs) {
		if r.Start.Reason != "tick" || r.End.Event == "" {
			continue
		}
		if byTick[r.Start.Tick] == nil {
			byTick[r.Start.Tick] = map[string]int{}
		}
		o := string(driver.OutcomeDone)
		if r.Start.Entity == "e3" {
			o = string(driver.OutcomeFailed)
		}
		byTick[r.Start.Tick][o]++
	}
	checked := 0
	for _, tk := range h.Ticks {
		if !settled(tk) {
			continue
		}
		want := byTick[tk.Tick.Time().UTC().Format(time.RFC3339)]
		// e5 sleeps: its first run holds its lease, so every later tick
		// skips it as busy, and runs the 11 others.
		expect.Same(t, "outcomes of "+tk.Tick.Time().String(), tk.Outcomes, want)
		expect.Equal(t, "entities", tk.Entities, 12)
		expect.Equal(t, "runs and skips add up", tk.Runs+tk.Skipped["busy"]+tk.Skipped["already_ran"], 12)
		expect.Equal(t, "replicas that took part", len(tk.Replicas), 3)
		expect.True(t, "a tick that ran says when: "+tk.Reason, tk.Reason == "on time" || strings.HasPrefix(tk.Reason, "late by "))
		checked++
	}
	expect.True(t, "complete ticks checked", checked >= 3)
	expect.True(t, "e3's failure kept", len(h.Failures) > 0 && h.Failures[0].Entity == "e3" &&
		strings.Contains(h.Failures[0].Error, "exit status 3") && strings.Contains(h.Failures[0].Output, "quota exceeded"))
}

// killHolder kills -9 the process of procs holding entity's lease, and
// returns the tick of the run it kills.
func killHolder(t *testing.T, e *opsEnv, procs map[string]*tickdtest.Proc, entity string) time.Time {
	t.Helper()
	var holder string
	var heldTick time.Time
	for _, l := range tickdtest.HeldLeases(t, e.srv.Addr, "tickd") {
		if l.Entity == entity {
			holder = l.Holder
		}
	}
	for _, r := range tickdtest.ReadRuns(t, e.runs) {
		if r.Start.Entity == entity && r.End.Event == "" {
			heldTick, _ = time.Parse(time.RFC3339, r.Start.Tick)
		}
	}
	for _, p := range procs {
		if strings.HasSuffix(holder, fmt.Sprintf("-%d", p.Pid())) {
			p.Signal(syscall.SIGKILL)
			return heldTick
		}
	}
	t.Fatalf("no process holds %s (holder %q)", entity, holder)
	return time.Time{}
}

// TestNotFiringWhenNoReplicaRunsIt: every replica runs a config without a
// task; status and history with the config that has it flag it, and a
// pause lifts the flag.
func TestNotFiringWhenNoReplicaRunsIt(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "old"
every = "1s"
command = ["true"]
`)
	e.daemon("A", "1h")
	// Judged once A has announced itself: its readiness comes before its
	// first announcement, which a loaded machine delays (the judgement was
	// "no replica is running" 9 times in 15 beside three busy loops).
	expect.WaitFor(t, 10*time.Second, "A announced", func() bool {
		_, out, _ := cli("status", "-config", e.cfg, "-json")
		var doc report.StatusDoc
		return json.Unmarshal([]byte(out), &doc) == nil && len(doc.Replicas) == 1
	})
	newer := strings.Replace(e.cfg, "tickd.toml", "newer.toml", 1)
	tickdtest.WriteFile(t, newer, readFile(t, e.cfg)+`
[[tasks]]
name = "added"
every = "1s"
command = ["true"]
`)
	code, out, errs := cli("status", "-config", newer, "-json", "added")
	if code != 0 {
		t.Fatal(errs)
	}
	var doc report.StatusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	expect.Same(t, "the added task's flags", doc.Tasks[0].Flags, []string{"not_firing"})
	expect.True(t, "it says why", strings.Contains(doc.Tasks[0].NotFiring, "no replica runs this task"))
	h := e.history(newer, "added")
	expect.Same(t, "history flags it too", h.Flags, []string{"not_firing"})
	expect.Same(t, "the task the replica runs is not flagged", e.history(e.cfg, "old").Flags, []string{})
	code, text, _ := cli("status", "-config", newer, "added")
	expect.True(t, "text status says so", code == 0 && strings.Contains(text, "NOT FIRING: no replica runs this task"))
	if code, _, errs := cli("pause", "-config", newer, "added"); code != 0 {
		t.Fatal(errs)
	}
	expect.Same(t, "a paused task is not flagged", e.history(newer, "added").Flags, []string{})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTaskRegistryKeepsADroppedTaskFlagged: a task taken out of the only
// replica's config stays flagged as not firing after that replica restarts
// with the new config, in status, history and the replica's metrics, until
// tickd forget says it is gone on purpose.
func TestTaskRegistryKeepsADroppedTaskFlagged(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	const keep, drop = "\n[[tasks]]\nname = \"keep\"\nevery = \"1s\"\ncommand = [\"true\"]\n", "\n[[tasks]]\nname = \"drop\"\nevery = \"1s\"\ncommand = [\"WORKER\"]\n"
	e := newOpsEnv(t, true, keep+drop)
	a := e.daemon("A", "0s")
	expect.WaitFor(t, 20*time.Second, "a run of drop", func() bool { return len(tickdtest.ReadRuns(t, e.runs)) > 0 })
	a.Signal(syscall.SIGTERM)
	if code := a.Wait(20 * time.Second); code != 0 {
		t.Fatalf("A: exit %d", code)
	}
	full := readFile(t, e.cfg)
	worker := strings.ReplaceAll(drop, "WORKER", e.worker)
	expect.True(t, "the config holds drop", strings.Contains(full, worker))
	tickdtest.WriteFile(t, e.cfg, strings.Replace(full, worker, "", 1))
	e.daemon("A2", "0s") // the same replica, restarted without drop
	status := func() (report.TaskDoc, bool) {
		code, out, _ := cli("status", "-config", e.cfg, "-json")
		var doc report.StatusDoc
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil {
			return report.TaskDoc{}, false
		}
		for _, td := range doc.Tasks {
			if td.Name == "drop" {
				return td, true
			}
		}
		return report.TaskDoc{}, false
	}
	expect.WaitFor(t, 30*time.Second, "drop flagged in status", func() bool {
		td, ok := status()
		return ok && slices.Contains(td.Flags, "not_firing")
	})
	td, _ := status()
	expect.Equal(t, "in_config", td.InConfig, false)
	expect.True(t, "says no config lists it: "+td.NotFiring, strings.Contains(td.NotFiring, "no config lists this task any more") && strings.Contains(td.NotFiring, "tickd forget drop"))
	expect.Same(t, "history of drop, with the config that lacks it", e.history(e.cfg, "drop").Flags, []string{"not_firing"})
	expect.WaitFor(t, 40*time.Second, "the replica's metric", func() bool {
		_, m := get(t, "http://"+e.metrics+"/metrics")
		return strings.Contains(m, `tickd_task_not_firing{task="drop"} 1`)
	})

	code, out, errs := cli("forget", "-config", e.cfg, "-by", "alice", "-reason", "replaced by keep", "-json", "drop")
	expect.Equal(t, "forget: exit status", code, 0)
	expect.Equal[any](t, "forget -json names the task", decodeJSON(t, out)["task"], "drop")
	if t.Failed() {
		t.Fatal(errs)
	}
	if _, ok := status(); ok {
		t.Fatal("drop still in status after forget")
	}
	expect.WaitFor(t, 40*time.Second, "the metric gone", func() bool {
		_, m := get(t, "http://"+e.metrics+"/metrics")
		return !strings.Contains(m, `tickd_task_not_firing{task="drop"}`)
	})
	// Its history stays, as forget said: read as recorded, not flagged.
	h := e.history(e.cfg, "drop")
	expect.True(t, fmt.Sprintf("the forgotten task's history: %d ticks, flags %v", len(h.Ticks), h.Flags), len(h.Ticks) > 0 && len(h.Flags) == 0)
	expect.True(t, "the forget is in its actions", len(h.Actions) > 0 && h.Actions[0].Action == "forget")
	code, _, errs = cli("history", "-config", e.cfg, "never-was")
	expect.True(t, "history of a task never known: "+errs, code == 1 && strings.Contains(errs, "nor in the history"))
	code, _, errs = cli("forget", "-config", e.cfg, "drop")
	expect.Equal(t, "second forget: exit status", code, 1)
	expect.True(t, "second forget says why: "+errs, strings.Contains(errs, "nothing to forget"))
	code, _, errs = cli("forget", "-config", e.cfg, "keep")
	expect.Equal(t, "forget of a task a replica runs: exit status", code, 1)
	expect.True(t, "it says who runs it: "+errs, strings.Contains(errs, "keep is run by"))
}

// TestHistorySaysWhenTheLimitCutTheList: a list of failures or actions as
// long as -limit says more may be kept, and how to see them; a shorter one
// does not.
func TestHistorySaysWhenTheLimitCutTheList(t *testing.T) {
	t.Parallel()
	fs := make([]driver.Failure, 3)
	as := make([]driver.Action, 3)
	for limit, want := range map[int]bool{3: true, 20: false} {
		var b strings.Builder
		printFailures(&b, fs, time.UTC, limit)
		printActions(&b, as, time.UTC, limit)
		out := b.String()
		expect.Equal(t, fmt.Sprintf("-limit %d: the hint to raise it, twice, in\n%s", limit, out), strings.Count(out, "raise -limit") == 2, want)
	}
}

// TestSourceFailedSaidOnce: a tick whose entity source failed and started
// nothing says so once in tickd history's table ("(source failed)" was
// both its reason and the flag after it).
func TestSourceFailedSaidOnce(t *testing.T) {
	t.Parallel()
	task := &config.Task{Name: "sync", Location: time.UTC, FlagAfter: 3}
	rec := driver.TickRecord{Tick: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC), Parts: []driver.TickPart{{Replica: "r", Final: true, SourceFailed: true, SourceError: "boom"}}}
	var b strings.Builder
	printTicks(&b, report.TaskHistory{Task: task, Ticks: []history.TickView{{TickRecord: rec, State: history.TickComplete}}})
	expect.Equal(t, "times said:\n"+b.String(), strings.Count(b.String(), "source failed"), 1)
}
