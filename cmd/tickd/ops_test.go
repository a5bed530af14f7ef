package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// cli runs a tickd command in-process and returns exit code and output.
func cli(args ...string) (int, string, string) {
	var out, errb strings.Builder
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// decodeJSON decodes an operator command's -json output.
func decodeJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	checkSchema(t, out)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return m
}

type opsEnv struct {
	t       *testing.T
	srv     *redistest.Server
	dir     string
	cfg     string
	runs    string
	worker  string
	metrics string
}

// newOpsEnv writes a config with tasks (WORKER stands for the test worker)
// on a fresh Redis; with metrics, the daemon serves them on a free port.
func newOpsEnv(t *testing.T, metrics bool, tasks string) *opsEnv {
	e := &opsEnv{t: t, srv: redistest.Start(t), dir: t.TempDir()}
	tickdtest.InitEpoch(t, e.srv.Addr, "tickd")
	_, e.worker = tickdtest.Binaries(t)
	e.cfg = filepath.Join(e.dir, "tickd.toml")
	e.runs = filepath.Join(e.dir, "runs.log")
	daemon := ""
	if metrics {
		e.metrics = fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
		daemon = fmt.Sprintf("metrics_addr = %q", e.metrics)
	}
	tickdtest.WriteFile(t, e.cfg, fmt.Sprintf(`
[daemon]
log_format = "json"
shutdown_timeout = "300ms"
%s
[redis]
url = %q
[defaults]
lease_ttl = "1500ms"
`, daemon, e.srv.URL())+strings.ReplaceAll(tasks, "WORKER", e.worker))
	return e
}

func (e *opsEnv) daemon(name string, sleep string) *tickdtest.Proc {
	p := tickdtest.Start(e.t, name, []string{"TESTWORKER_LOG=" + e.runs, "TESTWORKER_MAX_SLEEP=" + sleep}, "-config", e.cfg)
	p.WaitReady(20 * time.Second)
	return p
}

func (e *opsEnv) status(task string) report.TaskDoc {
	e.t.Helper()
	code, out, errs := cli("status", "-config", e.cfg, "-json", task)
	if code != 0 {
		e.t.Fatalf("status: %d %s", code, errs)
	}
	checkSchema(e.t, out)
	var st report.StatusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Tasks) != 1 {
		e.t.Fatalf("status json %v: %s", err, out)
	}
	return st.Tasks[0]
}

func TestStatusShowsLeasesAndLastRuns(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "hold"
every = "1h"
catch_up = "1h"
entities = ["a b", "c"]
command = ["WORKER"]
[[tasks]]
name = "quick"
every = "1s"
command = ["true"]
`)
	e.daemon("A", "1h")
	expect.WaitFor(t, 20*time.Second, "leases and a last run", func() bool {
		return e.status("hold").LeaseCount == 2 && e.status("quick").LastRunCount == 1
	})
	h := e.status("hold")
	l := h.Leases[0]
	expect.True(t, "a held lease names its holder", l.Holder != "")
	expect.True(t, "a held lease has a fence", l.Fence != 0)
	expect.True(t, "a held lease has time left", l.TTLLeftS > 0)
	r := e.status("quick").LastRuns[0]
	expect.Equal(t, "last run's outcome", r.Outcome, string(driver.OutcomeDone))
	expect.Equal(t, "last run's reason", r.Reason, string(driver.ReasonTick))
	expect.True(t, "last run has ended", !r.Ended.Time().IsZero())
	expect.True(t, "last run has a duration", r.DurationS > 0)
	expect.True(t, "last run names its replica", r.Replica != "")
	// The replicas running now, as they announced themselves.
	_, js, _ := cli("status", "-config", e.cfg, "-json")
	var doc report.StatusDoc
	if err := json.Unmarshal([]byte(js), &doc); err != nil || len(doc.Replicas) != 1 {
		t.Fatalf("status -json replicas: %v %s", err, js)
	}
	rp := doc.Replicas[0]
	expect.True(t, "a replica's id, host and version", rp.ID != "" && rp.Host != "" && rp.Version != "")
	expect.Equal(t, "a replica's tasks", fmt.Sprint(rp.Tasks), "[hold quick]")
	expect.True(t, "a replica's start and last announcement", !rp.Since.Time().IsZero() && !rp.LastSeen.Time().Before(rp.Since.Time()))
	code, out, _ := cli("status", "-config", e.cfg)
	expect.Equal(t, "status exit code", code, 0)
	for _, want := range []string{`"a b"`, "leases held: 2", "OUTCOME", "replicas: 1 running", rp.ID + "  "} {
		expect.True(t, "human status shows "+want, strings.Contains(out, want))
	}
	if t.Failed() {
		t.Fatalf("human status:\n%s", out)
	}
	if code, out, _ := cli("status", "-config", e.cfg, "-json", "-outcome", "failed", "quick"); code != 0 || strings.Contains(out, `"outcome": "done"`) {
		t.Fatalf("outcome filter: %s", out)
	}
}

func TestTriggerRunsAndBusyGetsFollowUp(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	e := newOpsEnv(t, false, `
[[tasks]]
name = "trig"
every = "1h"
entities = ["x", "y"]
command = ["WORKER"]
[[tasks]]
name = "queued"
every = "1h"
catch_up = "1h"
on_busy = "queue"
command = ["WORKER", "6s"]
[[tasks]]
name = "skipped"
every = "1h"
catch_up = "1h"
command = ["WORKER", "6s"]
`)
	e.daemon("A", "0s")
	if code, out, errs := cli("trigger", "-config", e.cfg, "-wait", "trig", "x"); code != 0 || !strings.Contains(out, `trig "x": done`) {
		t.Fatalf("trigger: %d %s %s", code, out, errs)
	}
	code, out, errs := cli("trigger", "-config", e.cfg, "-wait", "-json", "trig", "y")
	if got := decodeJSON(t, out); code != 0 || fmt.Sprint(got) != "map[busy:[] paused:false runs:[map[entity:y outcome:done since:<nil> state:]] task:trig triggered:1]" {
		t.Fatalf("trigger -json: %d %s %s", code, out, errs)
	}
	// Busy entities: each trigger gets a follow-up after the holder,
	// whatever on_busy says (that is for ticks), and says so at once.
	expect.WaitFor(t, 20*time.Second, "catch-up runs holding the leases", func() bool {
		return e.status("queued").LeaseCount == 1 && e.status("skipped").LeaseCount == 1
	})
	var wg sync.WaitGroup
	var qcode, scode int
	var qout, sout string
	wg.Add(2)
	go func() { defer wg.Done(); qcode, qout, _ = cli("trigger", "-config", e.cfg, "-wait", "queued") }()
	go func() { defer wg.Done(); scode, sout, _ = cli("trigger", "-config", e.cfg, "-wait", "skipped") }()
	wg.Wait()
	if qcode != 0 || !strings.Contains(qout, `queued "queued": done`) {
		t.Fatalf("queued trigger: %d %s", qcode, qout)
	}
	if scode != 0 || !strings.Contains(sout, `skipped "skipped": busy (held by `) || !strings.Contains(sout, `skipped "skipped": done`) {
		t.Fatalf("trigger of a busy entity of an on_busy = skip task: %d %s", scode, sout)
	}
	runs := tickdtest.ReadRuns(t, e.runs)
	var tick, follow *tickdtest.Run
	for i, r := range runs {
		if r.Start.Task == "queued" {
			switch r.Start.Reason {
			case "tick":
				tick = &runs[i]
			case "queued":
				follow = &runs[i]
			}
		}
	}
	if tick == nil || follow == nil || follow.Start.At < tick.End.At {
		t.Fatalf("follow-up not after the holder: %+v %+v", tick, follow)
	}
	if code, _, _ := cli("trigger", "-config", e.cfg, "nosuch"); code != 1 {
		t.Fatal("unknown task accepted")
	}
}

// TestTriggerWaitAnswersItsOwnRuns: -wait reports the runs its trigger
// caused, for every entity at once: a busy entity's follow-up (not the
// holder's run, which ends differently), a skip, a drop, and what had no
// answer when -timeout passed.
func TestTriggerWaitAnswersItsOwnRuns(t *testing.T) {
	t.Parallel()
	// Follow-up runs fail, every other run is done: the holder's outcome
	// cannot pass for the follow-up's.
	const sh = `command = ["sh", "-c", "test \"$TICKD_REASON\" != queued"]`
	tasks := `
[[tasks]]
name = "w"
every = "1h"
on_busy = "queue"
entities = ` + entityList(60) + `
` + sh + `
[[tasks]]
name = "s"
every = "1h"
entities = ["x", "y"]
` + sh + "\n"
	e := newOpsEnv(t, true, tasks)
	e.daemon("A", "0s")

	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	t.Cleanup(func() { c.Close() })
	holder, err := stores.Redis(c, "tickd", lease.Options{Replica: "test-holder"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Stop(context.Background()) })
	hold := func(task, entity string) *lease.Lease {
		l, err := holder.Acquire(context.Background(), driver.Request{Task: task, Entity: entity, TTL: 30 * time.Second, Reason: driver.ReasonTick, Tick: time.Now()})
		if err != nil {
			t.Fatalf("hold %s/%s: %v", task, entity, err)
		}
		return l
	}

	// 60 entities, one of them busy: its trigger becomes a follow-up, run
	// (and failed) once the holder's run ended done.
	busy := hold("w", "u7")
	var wcode int
	var wout string
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		wcode, wout, _ = cli("trigger", "-config", e.cfg, "-wait", "-json", "-timeout", "60s", "w")
	}()
	expect.WaitFor(t, 30*time.Second, "the other 59 triggered runs", func() bool {
		n := 0
		e.status("w")                                                                     // the schema holds while runs go on
		holder.Fleet().LastRuns(context.Background(), "w", func(r driver.LastRun) error { //nolint:errcheck // polled
			if r.Reason == driver.ReasonTrigger {
				n++
			}
			return nil
		})
		return n == 59
	})
	if _, err := busy.Release(context.Background(), driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	<-waited
	doc := decodeJSON(t, wout)
	answers := map[string]any{}
	for _, r := range doc["runs"].([]any) {
		m := r.(map[string]any)
		answers[m["entity"].(string)] = m["outcome"]
	}
	expect.Equal(t, "-wait's exit status (a run failed)", wcode, 1)
	expect.Equal(t, "answers", len(answers), 60)
	for id, a := range answers {
		want := "done"
		if id == "u7" {
			want = "failed" // the follow-up's, not the holder's "done"
		}
		expect.Equal(t, "answer for "+id, a, any(want))
	}

	// on_busy = skip is for ticks: a trigger of a busy entity waits for
	// its holder, and says so at once.
	held := hold("s", "x")
	code, out, _ := cli("trigger", "-config", e.cfg, "-wait", "-timeout", "2s", "s", "x", "y", "x")
	expect.Equal(t, "busy: exit status (x not answered yet)", code, 1)
	expect.True(t, "busy: x waits for its holder, y done:\n"+out, strings.Contains(out, `s "x": busy (held by `) &&
		strings.Contains(out, `s "x": pending (no answer within -timeout): running on`) && strings.Contains(out, `s "y": done`))
	expect.Equal(t, "busy: two lines for x (its holder, its answer)", strings.Count(out, `s "x"`), 2)

	// A task no replica runs: dropped. Nothing answers a paused task's
	// trigger within -timeout: pending.
	other := filepath.Join(e.dir, "other.toml")
	cfg, _ := os.ReadFile(e.cfg)
	tickdtest.WriteFile(t, other, string(cfg)+"[[tasks]]\nname = \"gone\"\nevery = \"1h\"\n"+sh+"\n")
	code, out, _ = cli("trigger", "-config", other, "-wait", "-json", "gone")
	expect.Equal(t, "dropped: exit status", code, 1)
	expect.Equal(t, "dropped", fmt.Sprint(decodeJSON(t, out)["runs"]), "[map[entity:gone outcome:dropped since:<nil> state:]]")
	if code, _, errs := cli("pause", "-config", e.cfg, "s"); code != 0 {
		t.Fatal(errs)
	}
	expect.WaitFor(t, 10*time.Second, "the daemon sees the pause", func() bool {
		_, m := get(t, "http://"+e.metrics+"/metrics")
		return strings.Contains(m, `tickd_task_paused{task="s"} 1`)
	})
	code, out, errs := cli("trigger", "-config", e.cfg, "-wait", "-timeout", "1s", "s", "y")
	expect.Equal(t, "paused: exit status", code, 1)
	expect.True(t, "paused: pending:\n"+out+errs, strings.Contains(out, `s "y": pending`) && strings.Contains(errs, "not answered within -timeout"))
	// -wait says where the pending run is: queued (the task is paused).
	expect.True(t, "paused: pending says where the run is:\n"+out, strings.Contains(out, `s "y": pending (no answer within -timeout): queued as trigger`))
	expect.True(t, "paused: it waits for the resume, not for a slot:\n"+out, strings.Contains(out, "the task is paused: it runs once the task is resumed"))
	held.Release(context.Background(), driver.Finished{Outcome: driver.OutcomeDone}, nil) //nolint:errcheck
}

func TestPauseStopsTicksOnEveryReplica(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "p"
every = "1s"
entities = ["a", "b", "c"]
command = ["WORKER"]
`)
	e.daemon("A", "0s")
	e.daemon("B", "0s")
	expect.WaitFor(t, 20*time.Second, "runs", func() bool { return len(tickdtest.ReadRuns(t, e.runs)) >= 6 })
	if code, out, errs := cli("pause", "-config", e.cfg, "-json", "p"); code != 0 || decodeJSON(t, out)["paused"] != true {
		t.Fatal(out, errs)
	}
	paused := time.Now()
	if !e.status("p").Paused {
		t.Fatal("status does not show the pause")
	}
	code, out, _ := cli("trigger", "-config", e.cfg, "p", "a")
	expect.Equal(t, "trigger of a paused task: exit status", code, 0)
	expect.True(t, "trigger of a paused task warns: "+out, strings.Contains(out, "note: p is paused"))
	// Within a second every replica stops; then two more ticks pass.
	expect.WaitFor(t, 10*time.Second, "3s after pause", func() bool { return time.Since(paused) > 3*time.Second })
	for _, r := range tickdtest.ReadRuns(t, e.runs) {
		if r.Start.At > paused.Add(1100*time.Millisecond).UnixNano() {
			t.Fatalf("run started %v after pause", time.Duration(r.Start.At-paused.UnixNano()))
		}
	}
	if code, _, _ := cli("resume", "-config", e.cfg, "p"); code != 0 {
		t.Fatal("resume")
	}
	resumed := time.Now().UnixNano()
	expect.WaitFor(t, 10*time.Second, "runs after resume", func() bool {
		for _, r := range tickdtest.ReadRuns(t, e.runs) {
			if r.Start.At > resumed {
				return true
			}
		}
		return false
	})
}

// TestPauseStopsTheFanOutUnderWay: a tick of 120 entities of 300ms runs,
// 3 at once on each of 2 replicas, takes about 6s to fan out. tickd pause
// 1.5s into it: no run of the task starts on any replica later than a
// second after the command returned (the runs under way finish), and the
// tick's record says the fan-out was paused, with the entities it did not
// come to. Before, the fan-out went on to its last entity.
func TestPauseStopsTheFanOutUnderWay(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	ids := make([]string, 120)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", fmt.Sprint("e", i))
	}
	e := newOpsEnv(t, false, fmt.Sprintf(`
[[tasks]]
name = "slow"
every = "20s"
concurrency = 3
lease_ttl = "3s"
entities = [%s]
command = ["WORKER", "300ms"]
`, strings.Join(ids, ", ")))
	e.daemon("A", "0s")
	e.daemon("B", "0s")
	var T time.Time
	expect.WaitFor(t, 90*time.Second, "a tick's first runs", func() bool {
		runs := tickdtest.ReadRuns(t, e.runs)
		if len(runs) == 0 {
			return false
		}
		T, _ = time.Parse(time.RFC3339Nano, runs[0].Start.Tick)
		return time.Since(T) > 1500*time.Millisecond
	})
	code, out, errs := cli("pause", "-config", e.cfg, "slow")
	if code != 0 {
		t.Fatal(out, errs)
	}
	paused := time.Now()
	expect.True(t, "the pause says it stops the fan-out: "+out, strings.Contains(out, "stops its fan-out under way"))
	expect.WaitFor(t, 10*time.Second, "3s after the pause", func() bool { return time.Since(paused) > 3*time.Second })
	runs := tickdtest.ReadRuns(t, e.runs)
	for _, r := range runs {
		if r.Start.At > paused.Add(time.Second).UnixNano() {
			t.Fatalf("%s started %v after the pause returned", r.Start.Entity, time.Duration(r.Start.At-paused.UnixNano()))
		}
	}
	expect.True(t, fmt.Sprintf("the fan-out was under way: %d runs of 120", len(runs)), len(runs) > 6 && len(runs) < 100)
	expect.WaitFor(t, 10*time.Second, "the tick's record", func() bool {
		for _, rec := range tickdtest.Ticks(t, e.srv.Addr, "tickd", "slow", 5) {
			if rec.Tick.Equal(T) && rec.Final() && rec.Skipped()[history.SkipPaused] > 0 {
				return true
			}
		}
		return false
	})
}

// TestUnlockStopsTheHolder: tickd unlock on an entity whose run is going
// revokes its lease; the holder (another process) stops its run at its next
// renewal, and a run triggered right after the unlock (the usual "clear it
// and run it again") starts only once the old one has ended, though the
// task's on_busy is skip (before, it was dropped: nothing ran, ever) (its worker takes 100ms to exit after SIGTERM, well
// within the 500ms before SIGKILL that lease_ttl 5s gives). With
// -force the lease is free at once, and the command warns that the old run
// may still be going.
func TestUnlockStopsTheHolder(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "stuck"
every = "1h"
catch_up = "1h"
lease_ttl = "5s"
command = ["WORKER"]
`) // on_busy = "skip": that is for ticks; a trigger waits for the holder

	tickdtest.Start(t, "A", []string{"TESTWORKER_LOG=" + e.runs, "TESTWORKER_MAX_SLEEP=1h", "TESTWORKER_TERM_DELAY=100ms"},
		"-config", e.cfg).WaitReady(20 * time.Second)
	expect.WaitFor(t, 20*time.Second, "run", func() bool { return len(tickdtest.ReadRuns(t, e.runs)) == 1 })
	code, out, errs := cli("unlock", "-config", e.cfg, "-by", "alice", "-json", "stuck", "stuck")
	got := decodeJSON(t, out)
	expect.Equal(t, "unlock exit code", code, 0)
	expect.Equal[any](t, "unlocked entity", got["entity"], "stuck")
	expect.True(t, "unlock names the holder", got["holder"] != nil && got["holder"] != "")
	expect.Equal[any](t, "unlocked by", got["by"], "alice")
	expect.True(t, "unlock gives the fence", got["fence"] != nil)
	expect.Equal[any](t, "freed at once", got["freed"], false)
	expect.True(t, "free within the lease's TTL at most", got["free_within_s"].(float64) <= 5)
	if t.Failed() {
		t.Fatalf("unlock: %d %s %s", code, out, errs)
	}
	code, out, errs = cli("trigger", "-config", e.cfg, "stuck", "stuck")
	if code != 0 {
		t.Fatalf("trigger: %s", errs)
	}
	unlocked := time.Now()
	// The trigger says the entity is busy, and that it runs once free; or,
	// when the unlocked run's holder heard of the unlock and ended it before
	// the trigger looked (which, the load decides), that it triggered it.
	busy := strings.Contains(out, `stuck "stuck": busy (held by `) && strings.Contains(out, "runs when it is free")
	expect.True(t, "the trigger says the entity is busy and runs once free, or that it triggered it: "+out,
		busy || strings.Contains(out, "triggered 1 run(s) of stuck"))
	expect.WaitFor(t, 10*time.Second, "the triggered run", func() bool { return len(tickdtest.ReadRuns(t, e.runs)) == 2 })
	runs := tickdtest.ReadRuns(t, e.runs)
	if runs[0].End.At == 0 || runs[1].Start.At < runs[0].End.At {
		t.Fatalf("the triggered run started before the unlocked one ended: %+v", runs)
	}
	expect.Equal(t, "the old run was stopped", runs[0].End.Signal, "terminated")
	if d := time.Duration(runs[0].End.At - unlocked.UnixNano()); d > 5*time.Second { // the next renewal: within lease_ttl/3
		t.Fatalf("holder stopped %v after unlock", d)
	}
	// Its reason is queued when the trigger's due entry was taken while the
	// old run still held the lease (it waited behind it), trigger when the
	// old run had ended by then: which, the load decides.
	expect.True(t, "the triggered run's reason is queued or trigger: "+runs[1].Start.Reason,
		runs[1].Start.Reason == "queued" || runs[1].Start.Reason == "trigger")

	// -force frees the lease at once, and says what that risks.
	code, out, errs = cli("unlock", "-config", e.cfg, "-force", "stuck", "stuck")
	expect.Equal(t, "unlock -force: exit status", code, 0)
	expect.True(t, "unlock -force says it freed the lease: "+out, strings.Contains(out, "released stuck/stuck"))
	expect.True(t, "unlock -force warns the run may still be going: "+errs, strings.Contains(errs, "may still be going"))
	expect.WaitFor(t, 10*time.Second, "the forced holder stopped", func() bool {
		r := tickdtest.ReadRuns(t, e.runs)
		return len(r) == 2 && r[1].End.Signal == "terminated"
	})
	code, _, errs = cli("unlock", "-config", e.cfg, "stuck", "stuck")
	expect.Equal(t, "second unlock: exit status", code, 1)
	expect.Equal(t, "second unlock says nothing was held", errs, "tickd unlock: no lease held on stuck \"stuck\": nothing to release\n")
	code, out, _ = cli("unlock", "-config", e.cfg, "-json", "stuck", "stuck")
	expect.Equal(t, "second unlock -json: exit status", code, 1)
	expect.Equal[any](t, "second unlock -json: the error object", decodeJSON(t, out)["error"], "no lease held on stuck \"stuck\": nothing to release")
}

// TestUnlockOfAFrozenHolder: an unlock of a lease whose holder is stopped
// (SIGSTOP) cannot tell it anything; the entity is free once the lease
// expires, within one lease_ttl of the unlock, and no run starts before.
func TestUnlockOfAFrozenHolder(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "stuck"
every = "1h"
catch_up = "1h"
command = ["WORKER"]
`)
	a := e.daemon("A", "1h")
	expect.WaitFor(t, 20*time.Second, "run", func() bool { return len(tickdtest.ReadRuns(t, e.runs)) == 1 })
	a.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
	code, out, errs := cli("unlock", "-config", e.cfg, "-json", "stuck", "stuck")
	if code != 0 {
		t.Fatalf("unlock: %s %s", out, errs)
	}
	got := decodeJSON(t, out)
	expect.Equal[any](t, "freed at once", got["freed"], false)
	// Judged from the lease's own TTL in Redis, as the unlock read it, not
	// from this test's clock, which a loaded machine delays.
	if within, _ := got["free_within_s"].(float64); within <= 0 || within > 1.5 {
		t.Fatalf("free within %vs of the unlock of a frozen holder, want within lease_ttl (1.5s)", got["free_within_s"])
	}
	held := func() bool { return len(tickdtest.HeldLeases(t, e.srv.Addr, "tickd")) > 0 }
	expect.True(t, "held right after the unlock", held())
	expect.WaitFor(t, 5*time.Second, "the lease free", func() bool { return !held() })
	expect.Equal(t, "runs started meanwhile", len(tickdtest.ReadRuns(t, e.runs)), 1)
}

func TestLockRunsOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf("[redis]\nurl = %q\n[defaults]\nlease_ttl = \"2s\"\n[[tasks]]\nname = \"x\"\nevery = \"1h\"\ncommand = [\"true\"]\n", srv.URL()))
	out := filepath.Join(dir, "out")
	started := filepath.Join(dir, "started")
	a := tickdtest.Start(t, "lockA", nil, "lock", "-config", cfg, "-ttl", "2s", "job", "--",
		"sh", "-c", "echo A >> "+out+"; touch "+started+"; sleep 3; echo $TICKD_FENCE > "+out+".fence")
	expect.WaitFor(t, 20*time.Second, "A holds the lock", func() bool { _, err := os.Stat(started); return err == nil })
	b := tickdtest.Start(t, "lockB", nil, "lock", "-config", cfg, "-busy-exit", "9", "job", "--", "sh", "-c", "echo B >> "+out)
	if code := b.Wait(10 * time.Second); code != 9 {
		t.Fatalf("busy lock exit %d, want 9:\n%s", code, b.Log())
	}
	if !strings.Contains(b.Log(), "held by another holder") {
		t.Fatalf("busy lock did not say why:\n%s", b.Log())
	}
	if code := a.Wait(20 * time.Second); code != 0 {
		t.Fatalf("lock A exit %d", code)
	}
	// On a Redis new to tickd, A waited out the quarantine (lease_ttl, 2s),
	// and said so once, with how long, not once a second.
	if n := strings.Count(a.Log(), "waiting: Redis lost its data or is new to tickd"); n != 1 || !strings.Contains(a.Log(), "wait=") {
		t.Fatalf("the quarantine's wait said %d times:\n%s", n, a.Log())
	}
	data, _ := os.ReadFile(out)
	if string(data) != "A\n" {
		t.Fatalf("command ran as %q", data)
	}
	// The exit status passes through; the key is free again.
	c := tickdtest.Start(t, "lockC", nil, "lock", "-config", cfg, "job", "--", "sh", "-c", "exit 7")
	if code := c.Wait(10 * time.Second); code != 7 {
		t.Fatalf("exit status not passed through: %d", code)
	}
	// SIGTERM to tickd lock stops the command and releases.
	d := tickdtest.Start(t, "lockD", nil, "lock", "-config", cfg, "job", "--", "sh", "-c", "touch "+out+".d; sleep 60")
	expect.WaitFor(t, 10*time.Second, "D runs", func() bool { _, err := os.Stat(out + ".d"); return err == nil })
	d.Signal(syscall.SIGTERM)
	d.Wait(10 * time.Second)
	e := tickdtest.Start(t, "lockE", nil, "lock", "-config", cfg, "job", "--", "true")
	if code := e.Wait(10 * time.Second); code != 0 || strings.Contains(e.Log(), "held by") {
		t.Fatalf("key not released after SIGTERM: %d %s", code, e.Log())
	}
	// kill -9 of tickd lock takes CMD with it: nothing goes on without a
	// renewed lease.
	pidFile := filepath.Join(dir, "f.pid")
	f := tickdtest.Start(t, "lockF", nil, "lock", "-config", cfg, "job", "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	var pid int
	expect.WaitFor(t, 10*time.Second, "F's command runs", func() bool {
		b, _ := os.ReadFile(pidFile)
		_, err := fmt.Sscan(string(b), &pid)
		return err == nil && pid > 0
	})
	f.Signal(syscall.SIGKILL)
	expect.WaitFor(t, 5*time.Second, "F's command to die with it", func() bool { return !alive(pid) })
}

// alive says whether pid is a running process (a zombie waiting to be reaped
// by whoever adopted it is not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMetricsAndReadiness(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, true, `
[[tasks]]
name = "m"
every = "1s"
entities = ["a", "b"]
command = ["WORKER"]
`)
	e.daemon("A", "0s")
	base := "http://" + e.metrics
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	value := func() string {
		_, body := get(t, base+"/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, `tickd_runs_total{outcome="done",reason="tick",task="m"}`) {
				return strings.Fields(line)[1]
			}
		}
		return ""
	}
	expect.WaitFor(t, 20*time.Second, "runs counted", func() bool { v := value(); return v != "" && v != "0" })
	first := value()
	expect.WaitFor(t, 10*time.Second, "counter moves", func() bool { return value() != first })
	_, body := get(t, base+"/metrics")
	for _, want := range []string{"tickd_run_duration_seconds_bucket", "tickd_tick_lag_seconds_bucket", `tickd_entities_per_tick{task="m"} 2`, "tickd_lease_renewal_rounds_total", "tickd_due_entries",
		// series that exist before their first event, and the build
		`tickd_lease_losses_total{task="m"} 0`, `tickd_source_failures_total{task="m"} 0`, `tickd_redis_errors_total{op="acquire"} 0`,
		`tickd_task_paused{task="m"} 0`, `tickd_last_good_tick_timestamp_seconds{task="m"}`, `tickd_build_info{go_version="go1.`,
		`tickd_run_duration_seconds_bucket{task="m",le="41943.04"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `entity="`) {
		t.Error("a metric is labelled per entity")
	}
	expect.WaitFor(t, 10*time.Second, "ready", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	e.srv.Stop()
	expect.WaitFor(t, 10*time.Second, "not ready without Redis", func() bool { code, _ := get(t, base+"/readyz"); return code == 503 })
	e.srv.Restart()
	expect.WaitFor(t, 10*time.Second, "ready again", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
}

// TestStatusWithManyEntities: over 200,000 entities, status looks at about
// StatusScan of them (and says so: complete false); -all walks every one,
// with complete counts and the most recent last runs first.
func TestStatusWithManyEntities(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, "[[tasks]]\nname = \"big\"\nevery = \"1h\"\ncommand = [\"true\"]\n")
	// 200,000 entities, 300 of them held and the others with a last run,
	// written through a lease store (the one definition of the stored
	// format), as a big deployment leaves them: u300 ended last, then u301…
	const n, held = 200000, 300
	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	defer c.Close()
	ctx := context.Background()
	store, err := stores.Redis(c, "tickd", lease.Options{Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	store.InitEpoch(ctx) //nolint:errcheck
	defer store.Stop(context.Background())
	now := time.Now()
	for lo := 0; lo < n; lo += driver.BatchSize {
		reqs := make([]driver.Request, min(driver.BatchSize, n-lo))
		for j := range reqs {
			reqs[j] = driver.Request{Task: "big", Entity: fmt.Sprint("u", lo+j), TTL: time.Hour, Reason: driver.ReasonTick, Tick: now.Add(-time.Minute)}
		}
		var older []*lease.Lease
		for j, r := range store.AcquireBatch(ctx, reqs) {
			switch i := lo + j; {
			case r.Err != nil:
				t.Fatal(r.Err)
			case i < held: // stays held
			case i < held+10: // the most recent runs, in order
				end := now.Add(-time.Duration(i-held) * time.Millisecond)
				if _, err := r.Lease.Release(ctx, driver.Finished{Outcome: driver.OutcomeDone, Started: end.Add(-time.Second), Ended: end}, nil); err != nil {
					t.Fatal(err)
				}
			default:
				older = append(older, r.Lease)
			}
		}
		if _, err := store.ReleaseBatch(ctx, older, driver.Finished{Outcome: driver.OutcomeDone, Started: now.Add(-2 * time.Hour), Ended: now.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(args ...string) (report.TaskDoc, time.Duration) {
		start := time.Now()
		code, out, errs := cli(append([]string{"status", "-config", e.cfg, "-json", "-limit", "5"}, args...)...)
		took := time.Since(start)
		if code != 0 {
			t.Fatalf("status: %s", errs)
		}
		var st report.StatusDoc
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		return st.Tasks[0], took
	}
	// Without -all: about StatusScan entities looked at, and said so.
	s, took := status("big")
	expect.True(t, fmt.Sprintf("entities scanned without -all: %d", s.EntitiesScanned), s.EntitiesScanned >= report.StatusScan && s.EntitiesScanned < report.StatusScan+2000)
	expect.Equal(t, "complete without -all", s.Complete, false)
	expect.True(t, "counts of those looked at", s.LastRunCount+s.LeaseCount <= s.EntitiesScanned)
	t.Logf("status over %d entities took %v (bounded)", n, took)

	s, took = status("-all", "big")
	expect.Equal(t, "entities scanned with -all", s.EntitiesScanned, n)
	expect.Equal(t, "complete with -all", s.Complete, true)
	expect.Equal(t, "last runs counted", s.LastRunCount, n-held)
	expect.Equal(t, "last runs shown", len(s.LastRuns), 5)
	expect.Equal(t, "leases counted", s.LeaseCount, held)
	if !expect.Equal(t, "leases shown", len(s.Leases), 5) || len(s.LastRuns) != 5 {
		t.FailNow()
	}
	// The most recent runs are shown: u300..u304 ended last.
	for i, r := range s.LastRuns {
		if r.Entity != fmt.Sprint("u", held+i) {
			t.Fatalf("row %d is %s, want the most recent runs first", i, r.Entity)
		}
	}
	t.Logf("status -all over %d entities took %v", n, took)
}

// TestMigrateCommand: beside an older tickd's keys, commands refuse and say
// what to do; `tickd migrate` moves the keys, and they work again.
func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[redis]
url = %q
[[tasks]]
name = "m"
every = "1h"
command = ["true"]
`, srv.URL()))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	c.Set(ctx, "tickd:epoch", "0|0", 0)
	c.HSet(ctx, "tickd:{m}:entities", "m", "1|2||0|0|3||0|#")
	// Every command that reads or writes Redis refuses, and says what to do.
	for _, args := range [][]string{{"trigger", "m"}, {"status"}, {"pause", "m"}, {"resume", "m"}, {"unlock", "m", "e"}, {"check", "-redis"}} {
		code, _, errs := cli(append([]string{args[0], "-config", cfg}, args[1:]...)...)
		expect.Equal(t, args[0]+" beside old keys: exit status", code, 1)
		expect.True(t, args[0]+" says what to do: "+errs, strings.Contains(errs, "tickd:epoch of an older tickd") && strings.Contains(errs, "tickd migrate"))
	}
	code, out, errs := cli("migrate", "-config", cfg, "-json")
	if code != 0 || fmt.Sprint(decodeJSON(t, out)) != "map[due:0 from:1 layout:3 resharded:[] tasks:1]" {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	if code, _, errs := cli("trigger", "-config", cfg, "m"); code != 0 {
		t.Fatalf("trigger after migrate: %d %s", code, errs)
	}
	// The task's config now wants 4 shards: migrate reshards it, once (its
	// one entity, m, is in shard 0 of 4: it stays; TestReshard… in lease
	// moves entities).
	data, _ := os.ReadFile(cfg)
	tickdtest.WriteFile(t, cfg, strings.Replace(string(data), `name = "m"`, `name = "m"`+"\nshards = 4", 1))
	code, out, errs = cli("migrate", "-config", cfg, "-json")
	doc := decodeJSON(t, out)
	if rs, ok := doc["resharded"].([]any); ok && len(rs) == 1 { // how long it took varies: said, in seconds
		r := rs[0].(map[string]any)
		if took, ok := r["took_s"].(float64); !ok || took <= 0 || took > 10 {
			t.Errorf("took_s %v", r["took_s"])
		}
		delete(r, "took_s")
	}
	if code != 0 || fmt.Sprint(doc) != "map[due:0 from:0 layout:3 resharded:[map[due:0 entities:0 followups:0 from:1 task:m to:4]] tasks:0]" {
		t.Fatalf("migrate to 4 shards: %d %s %s", code, out, errs)
	}
	checkReshardInTaskActions(t, cfg, "m", "1 → 4 shards")
	code, out, errs = cli("migrate", "-config", cfg)
	expect.True(t, fmt.Sprintf("migrate again: %d %s %s", code, out, errs), code == 0 && strings.Contains(out, "every task in the shards its config gives"))
	// status shows the count in force, and the config's when it differs.
	data, _ = os.ReadFile(cfg)
	tickdtest.WriteFile(t, cfg, strings.Replace(string(data), "shards = 4", "shards = 2", 1))
	code, out, errs = cli("status", "-config", cfg, "-json", "m")
	var st report.StatusDoc
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Tasks) != 1 {
		t.Fatalf("status: %d %v %s %s", code, err, out, errs)
	}
	expect.True(t, fmt.Sprintf("status -json: shards %d, config_shards %d", st.Tasks[0].Shards, st.Tasks[0].ConfigShards), st.Tasks[0].Shards == 4 && st.Tasks[0].ConfigShards == 2)
	_, out, _ = cli("status", "-config", cfg, "m")
	expect.True(t, "status says the count in force and the config's:\n"+out, strings.Contains(out, "shards: 4, recorded in Redis and in force; the config says 2"))
	// So does check -redis.
	code, out, errs = cli("check", "-redis", "-config", cfg)
	expect.True(t, fmt.Sprintf("check -redis says the recorded count: %d %s %s", code, out, errs), code == 0 && strings.Contains(out, "2 shard(s) in the config but 4 recorded in Redis, in force: tickd migrate reshards it"))
	code, out, _ = cli("check", "-redis", "-json", "-config", cfg)
	task := decodeJSON(t, out)["tasks"].([]any)[0].(map[string]any)
	expect.True(t, fmt.Sprintf("check -redis -json: %d %v", code, task), task["shards"] == float64(2) && task["recorded_shards"] == float64(4))
}

// TestTriggerRefusesUnlistedEntity: an id the task's static list (or file,
// or a singleton's name) does not have is refused, naming it, unless
// -force; an entities_command is not run to check, so every id of its task
// needs -force (before, any id went, and reached the command).
func TestTriggerRefusesUnlistedEntity(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "listed"
every = "1h"
entities = ["x", "y"]
command = ["true"]
[[tasks]]
name = "single"
every = "1h"
command = ["true"]
[[tasks]]
name = "cmd"
every = "1h"
entities_command = ["false"]
command = ["true"]
`)
	for _, args := range [][]string{{"listed", "x", "typo"}, {"single", "other"}, {"cmd", "any"}} {
		code, _, errs := cli(append([]string{"trigger", "-config", e.cfg}, args...)...)
		expect.Equal(t, args[0]+": exit status", code, 1)
		expect.True(t, args[0]+": names the id and -force: "+errs, strings.Contains(errs, `does not list "`+args[len(args)-1]+`"`) && strings.Contains(errs, "-force"))
	}
	for _, args := range [][]string{{"-force", "listed", "typo"}, {"listed", "y"}, {"single", "single"}, {"-force", "cmd", "any"}} {
		if code, out, errs := cli(append([]string{"trigger", "-config", e.cfg}, args...)...); code != 0 {
			t.Errorf("trigger %v: %d %s %s", args, code, out, errs)
		}
	}
}

// TestPauseSaysWhatChanged: a pause of a paused task changes only what is
// given (its -for is kept otherwise), a resume of a running task changes
// nothing, and only real changes are recorded.
func TestPauseSaysWhatChanged(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, "\n[[tasks]]\nname = \"p\"\nevery = \"1h\"\ncommand = [\"true\"]\n")
	pause := func(args ...string) map[string]any {
		t.Helper()
		code, out, errs := cli(append([]string{"pause", "-config", e.cfg, "-json"}, append(args, "p")...)...)
		if code != 0 {
			t.Fatalf("pause %v: %s", args, errs)
		}
		return decodeJSON(t, out)
	}
	first := pause("-reason", "migration", "-for", "2h")
	expect.Equal[any](t, "first pause changed", first["changed"], true)
	again := pause()
	expect.Equal[any](t, "a second pause without anything new changes nothing", again["changed"], false)
	expect.True(t, "it says so: "+fmt.Sprint(again["said"]), strings.Contains(fmt.Sprint(again["said"]), "already paused") && strings.Contains(fmt.Sprint(again["said"]), "nothing changed"))
	expect.Equal[any](t, "its end is kept", again["until"], first["until"])
	same := pause("-reason", "migration")
	expect.Equal[any](t, "a second pause with the same reason changes nothing (and records nothing)", same["changed"], false)
	reason := pause("-reason", "migration, part 2")
	expect.Equal[any](t, "a new reason changes the pause", reason["changed"], true)
	expect.Equal[any](t, "and keeps its end", reason["until"], first["until"])
	if code, out, _ := cli("resume", "-config", e.cfg, "p"); code != 0 || !strings.HasPrefix(out, "resumed p (paused by ") {
		t.Fatalf("resume: %d %q", code, out)
	}
	code, out, _ := cli("resume", "-config", e.cfg, "p")
	expect.Equal(t, "resume of a running task: exit status", code, 0)
	expect.Equal(t, "it says nothing changed", out, "p is not paused: nothing changed\n")
	var whats []string
	for _, a := range e.history(e.cfg, "p").Actions {
		whats = append(whats, a.Action)
	}
	expect.Same(t, "actions recorded, newest first", whats, []string{"resume", "pause", "pause"})
}

// TestLockWithOnlyARedis: tickd lock takes a config with only [redis], on
// a Redis new to tickd waits its own -ttl (not the longest lease_ttl of
// tasks), shows its holder in status, and exits 127 for a command that is
// not there, as a shell does.
func TestLockWithOnlyARedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "redis.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf("[redis]\nurl = %q\n", srv.URL()))
	started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	began := time.Now()
	a := tickdtest.Start(t, "lockA", nil, "lock", "-config", cfg, "-ttl", "2s", "nightly", "--",
		"sh", "-c", "touch "+started+"; while [ ! -e "+stop+" ]; do sleep 0.05; done")
	expect.WaitFor(t, 20*time.Second, "the lock held", func() bool { _, err := os.Stat(started); return err == nil })
	// Without -ttl's own wait it would be the store's default bound, 1m: a
	// bound of 30s tells the two apart however loaded the machine (it
	// took 11.2s once beside the nemesis and the short tier).
	if d := time.Since(began); d > 30*time.Second {
		t.Fatalf("the first lock on a new Redis waited %v, want about -ttl (2s), not the default 1m", d)
	}
	code, out, errs := cli("status", "-config", cfg, "-json")
	if code != 0 {
		t.Fatal(errs)
	}
	doc := decodeJSON(t, out)
	expect.Equal[any](t, "lock_count", doc["lock_count"], float64(1))
	expect.Equal[any](t, "the lock's key", doc["locks"].([]any)[0].(map[string]any)["entity"], "nightly")
	tickdtest.WriteFile(t, stop, "")
	if code := a.Wait(10 * time.Second); code != 0 {
		t.Fatalf("lock exit %d:\n%s", code, a.Log())
	}
	b := tickdtest.Start(t, "lockB", nil, "lock", "-config", cfg, "-ttl", "2s", "nightly", "--", filepath.Join(dir, "no-such-command"))
	expect.Equal(t, "a missing command's exit status", b.Wait(10*time.Second), 127)
	expect.True(t, "it says so: "+b.Log(), strings.Contains(b.Log(), "command not found"))
}

// TestOneReplicaIDOneProcess: a second live process under a replica id
// already live (a copied unit file) is refused at start with a clear error;
// a process restarted under the id after a kill -9 starts once its
// predecessor's announcement lapses (no renewal: it was not running); one
// restarted after a graceful stop starts at once (the stop withdrew it).
func TestOneReplicaIDOneProcess(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "one"
every = "1s"
entities = ["a"]
command = ["WORKER"]
`)
	env := []string{"TESTWORKER_LOG=" + e.runs, "TICKD_REPLICA_ID=same"}
	a := tickdtest.Start(t, "A", env, "-config", e.cfg)
	a.WaitReady(20 * time.Second)
	expect.WaitFor(t, 20*time.Second, "A runs", func() bool { return len(tickdtest.ReadRuns(t, e.runs)) > 0 })
	b := tickdtest.Start(t, "B", env, "-config", e.cfg)
	expect.Equal(t, "the second live process's exit status", b.Wait(20*time.Second), 1)
	expect.True(t, "B says the id is in use by a live tickd:\n"+b.Log(), strings.Contains(b.Log(), `replica id "same" is in use by a live tickd on host`))
	expect.True(t, "A goes on", !a.Exited())

	a.Signal(syscall.SIGKILL)
	a.Wait(10 * time.Second)
	killed := time.Now()
	c := tickdtest.Start(t, "C", env, "-config", e.cfg)
	c.WaitReady(30 * time.Second)
	expect.WaitFor(t, 20*time.Second, "C runs", func() bool {
		runs := tickdtest.ReadRuns(t, e.runs)
		return runs[len(runs)-1].Start.At > killed.UnixNano()
	})
	c.Signal(syscall.SIGTERM)
	expect.Equal(t, "C's graceful stop", c.Wait(20*time.Second), 0)
	// The logs are read once each process has ended: its output is all
	// there then (readiness can come before the last lines are read).
	expect.True(t, "C waited for A's announcement to lapse", strings.Contains(c.Log(), "announcement lapsed"))
	d := tickdtest.Start(t, "D", env, "-config", e.cfg)
	d.WaitReady(20 * time.Second)
	d.Signal(syscall.SIGTERM)
	expect.Equal(t, "D's graceful stop", d.Wait(20*time.Second), 0)
	expect.True(t, "D did not wait: C withdrew its announcement", !strings.Contains(d.Log(), "waiting to see whether it is alive"))
}

// TestStatusBoundsThePendingWalk: a task with more pending runs than status
// looks at (a trigger of every entity, no replica running) costs what one of
// 2,000 does: due_count counts 2,000 and due_complete says it is a lower
// bound; -all counts them all. Before, status walked every pending run: 300
// ms of Redis CPU for 200,000 (BenchmarkPageView1M/api-status).
func TestStatusBoundsThePendingWalk(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, fmt.Sprintf(`
[[tasks]]
name = "big"
every = "1h"
command = ["WORKER"]
entities = %s
`, entityList(report.StatusScan+100)))
	if code, _, errs := cli("trigger", "-config", e.cfg, "big"); code != 0 {
		t.Fatal(errs)
	}
	st := e.status("big")
	expect.Equal(t, "pending counted without -all", st.DueCount, report.StatusScan)
	expect.Equal(t, "due_complete without -all", st.DueComplete, false)
	code, out, errs := cli("status", "-config", e.cfg, "-json", "-all", "big")
	if code != 0 {
		t.Fatal(errs)
	}
	doc := decodeJSON(t, out)["tasks"].([]any)[0].(map[string]any)
	expect.Equal[any](t, "pending counted with -all", doc["due_count"], float64(report.StatusScan+100))
	expect.Equal[any](t, "due_complete with -all", doc["due_complete"], true)
	_, text, _ := cli("status", "-config", e.cfg, "big")
	expect.True(t, "the text says it is a lower bound:\n"+text, strings.Contains(text, fmt.Sprintf("pending: at least %d", report.StatusScan)))
	expect.True(t, "with no replica running, not_firing says so: "+st.NotFiring, strings.HasPrefix(st.NotFiring, "no replica is running"))
}

// TestTLSToAPlaintextRedisSaysSo: a rediss:// url to a Redis that does not
// speak TLS: check -redis and status say what it looks like, not only
// "context deadline exceeded".
func TestTLSToAPlaintextRedisSaysSo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf("[redis]\nurl = %q\n[[tasks]]\nname = \"x\"\nevery = \"1h\"\ncommand = [\"true\"]\n", "rediss://"+srv.Addr))
	for _, args := range [][]string{{"check", "-redis", "-config", cfg}, {"status", "-config", cfg}} {
		code, _, errs := cli(args...)
		expect.True(t, fmt.Sprintf("%v fails: %d", args, code), code != 0)
		expect.True(t, fmt.Sprintf("%v says it looks like TLS to a plaintext Redis: %s", args, errs), strings.Contains(errs, "looks like TLS to a Redis that does not speak it"))
	}
}

// checkReshardInTaskActions: a reshard is in the task's own actions, not
// only the prefix's.
func checkReshardInTaskActions(t *testing.T, cfg, task, what string) {
	t.Helper()
	code, out, errs := cli("history", "-config", cfg, "-actions", task)
	expect.True(t, fmt.Sprintf("history -actions %s has the reshard: %d %s %s", task, code, out, errs), code == 0 && strings.Contains(out, "migrate by") && strings.Contains(out, what))
}

// TestShardsBeforeTheFirstTick: before a sharded task's first tick no
// count is recorded in Redis; check -redis and status say the config's
// count, which the first tick records, not "1 recorded in Redis, in force".
func TestShardsBeforeTheFirstTick(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tickdtest.InitEpoch(t, srv.Addr, "tickd")
	cfg := filepath.Join(t.TempDir(), "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf("[redis]\nurl = %q\n[[tasks]]\nname = \"s\"\nevery = \"1h\"\nshards = 16\ncommand = [\"true\"]\n", srv.URL()))
	code, out, errs := cli("check", "-redis", "-config", cfg)
	expect.True(t, fmt.Sprintf("check -redis: the config's 16 shards, none said recorded: %d %s %s", code, out, errs),
		code == 0 && strings.Contains(out, ", 16 shards") && !strings.Contains(out, "recorded"))
	code, out, errs = cli("status", "-config", cfg, "s")
	expect.True(t, fmt.Sprintf("status: 16 shards, nothing said to differ: %d %s %s", code, out, errs),
		code == 0 && strings.Contains(out, "shards: 16\n") && !strings.Contains(out, "recorded in Redis"))
}
