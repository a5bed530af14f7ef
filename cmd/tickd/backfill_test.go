package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
	"github.com/tickd/tickd/lease/driver"
)

// backfillCLI runs tickd backfill -json with args, and decodes its
// document into v.
func backfillCLI(t *testing.T, v any, args ...string) {
	t.Helper()
	code, out, errs := cli(append([]string{"backfill", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("backfill %v: exit %d: %s%s", args, code, out, errs)
	}
	checkSchema(t, out)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("backfill %v: %v\n%s", args, err, out)
	}
}

// TestBackfillRunsEachOnceAcrossAKill: a backfill of an hour of a
// minutely task over 10 entities, with one tick of it fanned out while the
// task kept no run record, and one entity's run of another tick recorded:
// the dry run counts exactly the runs it then starts; the replica running
// it is killed (kill -9) midway, and the other goes on where it stopped;
// every (entity, tick) runs at most once (once but for the runs granted
// to the killed replica that had not started), with reason backfill and
// its own tick, the unknown tick not at all; and the same backfill again
// starts none.
func TestBackfillRunsEachOnceAcrossAKill(t *testing.T) {
	tier.Full(t, "two replicas, and a backfill of 600 runs")
	t.Parallel()
	var ids []string
	for i := range 10 {
		ids = append(ids, fmt.Sprintf("e%02d", i))
	}
	e := newOpsEnv(t, false, fmt.Sprintf(`
[[tasks]]
name = "minutely"
every = "1m"
run_record = "720h"
entities = ["%s"]
command = ["WORKER"]
`, strings.Join(ids, `", "`)))
	from := time.Now().UTC().Truncate(time.Minute).Add(-90 * time.Minute)
	to := from.Add(59 * time.Minute)
	unknown, recorded, legacy := from.Add(10*time.Minute), from.Add(20*time.Minute), from.Add(30*time.Minute)
	seedHistory(t, e.cfg, unknown, recorded, legacy)

	var plan report.BackfillDoc
	backfillCLI(t, &plan, "-config", e.cfg, "minutely", "-from", from.Format(time.RFC3339), "-to", to.Format(time.RFC3339), "-dry-run")
	expect.Equal(t, "the dry run: ticks, unknown, runs", fmt.Sprint(plan.Ticks, plan.Unknown, plan.Runs), "60 2 579")

	env := []string{"TESTWORKER_LOG=" + e.runs, "TESTWORKER_MAX_SLEEP=20ms"}
	procs := map[string]*tickdtest.Proc{}
	for _, name := range []string{"A", "B"} {
		p := tickdtest.Start(t, name, append(env, "TICKD_REPLICA_ID="+name), "-config", e.cfg)
		p.WaitReady(20 * time.Second)
		procs[name] = p
	}
	var made report.BackfillDoc
	backfillCLI(t, &made, "-config", e.cfg, "minutely", "-from", from.Format(time.RFC3339), "-to", to.Format(time.RFC3339))
	expect.Equal(t, "the runs it starts", made.Runs, plan.Runs)
	var holder string
	expect.WaitFor(t, 30*time.Second, "a third of its ticks done", func() bool {
		bf := listedBackfill(t, e.cfg, made.ID)
		holder = bf.Holder
		return bf.Done >= 20 && holder != ""
	})
	killed := procs[strings.Split(holder, "/")[0]]
	if killed == nil {
		t.Fatalf("its holder %q is no replica of the test's", holder)
	}
	killed.Signal(syscall.SIGKILL)
	var end report.BackfillDoc
	expect.WaitFor(t, 60*time.Second, "the backfill to end on the other replica", func() bool {
		end = listedBackfill(t, e.cfg, made.ID)
		return end.State == "ended"
	})
	seen := map[string]bool{}
	backfilled := 0
	for _, r := range tickdtest.ReadRuns(t, e.runs) {
		if r.Start.Reason != string(driver.ReasonBackfill) {
			continue
		}
		backfilled++
		k := r.Start.Entity + "@" + r.Start.Tick
		expect.True(t, k+" ran once", !seen[k])
		seen[k] = true
		T := tickOf(t, r)
		expect.True(t, k+": a tick of the range, not the unknown one", !T.Before(from) && !T.After(to) && !T.Equal(unknown) && !T.Equal(legacy))
	}
	// A run the killed replica was granted (its bit set) and had not
	// started yet is not run again: at most once, not exactly once. Its
	// runs in flight are at most half the task's run slots (2 here).
	var lost []string
	for T := from; !T.After(to); T = T.Add(time.Minute) {
		for _, id := range ids {
			if k := id + "@" + T.Format(time.RFC3339); !seen[k] && !T.Equal(unknown) && !T.Equal(legacy) && k != "e00@"+recorded.Format(time.RFC3339) {
				lost = append(lost, k)
			}
		}
	}
	t.Logf("backfilled %d runs of %d planned, lost to the kill: %v", backfilled, plan.Runs, lost)
	expect.True(t, "the runs backfilled, but for those lost to the kill", backfilled <= int(plan.Runs) && backfilled >= int(plan.Runs)-2)
	expect.True(t, "e00@"+recorded.Format(time.RFC3339)+" (recorded) did not run again", !seen["e00@"+recorded.Format(time.RFC3339)])
	expect.Equal(t, "its ticks done", end.Done, 58)
	// Runs started by the killed replica and not yet saved in its progress
	// count as run before, for the replica that went on.
	expect.Equal(t, "its runs started and found run before, in all", end.Ran+end.Skipped, int64(580))

	checkBackfillShown(t, e, made.ID)

	var again report.BackfillDoc
	backfillCLI(t, &again, "-config", e.cfg, "minutely", "-from", from.Format(time.RFC3339), "-to", to.Format(time.RFC3339), "-dry-run")
	expect.Equal(t, "the same backfill again: runs", again.Runs, int64(0))
}

// checkBackfillShown: status shows backfill id, ended, and the history
// says who asked for it and its end.
func checkBackfillShown(t *testing.T, e *opsEnv, id string) {
	t.Helper()
	code, out, errs := cli("status", "-config", e.cfg, "-json", "minutely")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	checkSchema(t, out)
	var st report.StatusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Backfills) != 1 {
		t.Fatalf("status -json: %v, backfills %+v", err, st.Backfills)
	}
	b := st.Backfills[0]
	expect.Equal(t, "status: its state, done, left, failed", fmt.Sprintf("%s %d %d %d", b.State, b.Done, b.Left, b.Failed), "ended 58 0 0")
	if _, text, _ := cli("status", "-config", e.cfg, "minutely"); !strings.Contains(text, id+"  minutely") {
		t.Errorf("status does not list the backfill:\n%s", text)
	}
	var said []string
	for _, a := range e.history(e.cfg, "minutely").Actions {
		if a.Action == string(driver.ActionBackfill) && strings.Contains(a.Detail, id) {
			said = append(said, a.By)
		}
	}
	expect.Equal(t, "the history's backfill actions: its end (by the replica), its start (by the operator)", len(said), 2)
}

// seedHistory leaves, in the store of the config at path, tick unknown
// fanned out while no run record was kept (e05 ran it), entity e00's run
// of tick recorded in the run record, and tick legacy fanned out by a
// tickd before fan marks (its tick record alone).
func seedHistory(t *testing.T, path string, unknown, recorded, legacy time.Time) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := app.OpenStore(cfg, lease.Options{Replica: "seed"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx := context.Background()
	if err := s.Fleet().RecordTicks(ctx, []driver.TickWrite{{Task: "minutely", Tick: legacy,
		Part: driver.TickPart{Replica: "old", Final: true, Written: legacy, Entities: 10, Started: 10}, Keep: driver.DefaultHistory()}}); err != nil {
		t.Fatal(err)
	}
	for _, req := range []driver.Request{
		{Task: "minutely", Entity: "e05", TTL: time.Minute, Reason: driver.ReasonTick, Tick: unknown},
		{Task: "minutely", Entity: "e00", TTL: time.Minute, Reason: driver.ReasonTick, Tick: recorded, Record: time.Hour},
	} {
		l, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Release(ctx, driver.Finished{Outcome: driver.OutcomeDone}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// listedBackfill is backfill id as tickd backfill -json lists it.
func listedBackfill(t *testing.T, cfg, id string) report.BackfillDoc {
	t.Helper()
	var list report.BackfillListDoc
	backfillCLI(t, &list, "-config", cfg)
	for _, b := range list.Backfills {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("backfill %s is not listed: %+v", id, list)
	return report.BackfillDoc{}
}
