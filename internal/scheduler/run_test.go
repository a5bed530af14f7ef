package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

func TestRescheduleChainDrainsWithinTheTick(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		var mu sync.Mutex
		work := map[string]int{"a": 5, "b": 3, "c": 0}
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			if work[r.Entity] > 0 {
				work[r.Entity]--
				if work[r.Entity] > 0 {
					return tasks.Reschedule, nil
				}
			}
			return tasks.Done, nil
		}
		// An hourly task caught up at start: the chain must drain long before
		// the next tick.
		e.start(`
[[tasks]]
name = "drain"
every = "1h"
catch_up = "1h"
handler = "rec"
lease_ttl = "3s"
entities = ["a", "b", "c"]
`)
		expect.WaitFor(t, 10*time.Second, "work drained", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return work["a"] == 0 && work["b"] == 0 && e.rec.count(func(r runRec) bool { return r.Entity == "a" && !r.end.IsZero() }) == 5
		})
		runs := e.rec.snapshot()
		tick := runs[0].Tick
		for _, r := range runs {
			if !r.Tick.Equal(tick) {
				t.Fatalf("run %+v belongs to another tick than %v", r.Run, tick)
			}
		}
		if n := e.rec.count(func(r runRec) bool { return r.Entity == "a" && r.Reason == "reschedule" }); n != 4 {
			t.Fatalf("a: %d reschedule runs, want 4", n)
		}
		if n := e.rec.count(func(r runRec) bool { return r.Entity == "c" }); n != 1 {
			t.Fatalf("c ran %d times", n)
		}
	})
}

func TestMaxReschedules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) { return tasks.Reschedule, nil }
	e.start(`
[[tasks]]
name = "greedy"
every = "1h"
catch_up = "1h"
handler = "rec"
max_reschedules = 3
`)
	e.ev.waitFor(t, 10*time.Second, "max_reschedules reached", kind(EventRescheduleLimit))
	if n := e.rec.count(func(runRec) bool { return true }); n != 4 {
		t.Fatalf("%d runs, want 1 tick run + 3 reschedules", n)
	}
}

func TestExecSeesEnvAndLiteralEntity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hostile := "a b;$(touch " + filepath.Join(dir, "pwned") + ")`touch " + filepath.Join(dir, "pwned2") + "` \"q\" 'q'"
	e := newEnv(t, true)
	out := filepath.Join(dir, "out")
	script := filepath.Join(dir, "show.sh")
	os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$1\" > \""+out+".$TICKD_FENCE\"\n"+
		"echo \"env $TICKD_TASK|$TICKD_ENTITY|$TICKD_TICK|$TICKD_FENCE|$TICKD_REASON\"\necho oops >&2\n"), 0o755) //nolint:errcheck
	e.start(fmt.Sprintf(`
[[tasks]]
name = "execd"
every = "1h"
catch_up = "1h"
lease_ttl = "3s"
command = [%q, "{entity}"]
entities = [%q]
`, script, hostile))
	e.ev.waitFor(t, 10*time.Second, "run ended", kind(EventRunEnded))
	matches, _ := filepath.Glob(out + ".*")
	if len(matches) != 1 {
		t.Fatalf("outputs %v", matches)
	}
	got, _ := os.ReadFile(matches[0])
	if string(got) != hostile+"\n" {
		t.Fatalf("argv[1] = %q, want the literal %q", got, hostile)
	}
	for _, f := range []string{"pwned", "pwned2"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Fatalf("the entity id ran a command (%s exists)", f)
		}
	}
	fence := strings.TrimPrefix(filepath.Ext(matches[0]), ".")
	var tick time.Time
	e.ev.count(func(ev Event) bool { tick = ev.Tick; return true })
	// The run's output lines are logged with the run's attributes.
	run := map[string]string{logs.KeyTask: "execd", logs.KeyEntity: hostile, logs.KeyFence: fence, logs.KeyTick: tick.UTC().Format(time.RFC3339)}
	for _, want := range []struct {
		msg   string
		attrs map[string]string
	}{
		{"env execd|" + hostile + "|" + tick.UTC().Format(time.RFC3339) + "|" + fence + "|tick", map[string]string{}},
		{"oops", map[string]string{}},
		{"run ended", map[string]string{logs.KeyOutcome: "done"}},
	} {
		maps.Copy(want.attrs, run)
		if e.logs.count(want.msg, want.attrs) != 1 {
			t.Errorf("no log line %q with %v", want.msg, want.attrs)
		}
	}
	if t.Failed() {
		t.Log(e.logs)
	}
}

func TestRunStoppedWhenLeaseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		<-ctx.Done()
		return tasks.Done, context.Cause(ctx)
	}
	_, st := e.start(`
[[tasks]]
name = "lost"
every = "1h"
catch_up = "1h"
handler = "rec"
lease_ttl = "1500ms"
`)
	expect.WaitFor(t, 10*time.Second, "run started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
	if _, err := st.Unlock(context.Background(), "lost", "lost", "test", true); err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 5*time.Second, "run stopped", func() bool {
		return e.rec.count(func(r runRec) bool { return !r.end.IsZero() }) == 1
	})
	r := e.rec.snapshot()[0]
	if !errors.Is(r.cause, lease.ErrLost) {
		t.Fatalf("cause %v", r.cause)
	}
	e.ev.waitFor(t, 5*time.Second, "the run to end as lease_lost", ended(driver.OutcomeLeaseLost))
}

// TestUnlockRevokesTheRun: an operator's unlock (not forced) stops the
// run, with cause lease.ErrRevoked, and the run's release records it as
// unlocked; the entity is free once it has.
func TestUnlockRevokesTheRun(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			<-ctx.Done()
			return tasks.Done, context.Cause(ctx)
		}
		_, st := e.start("[[tasks]]\nname = \"u\"\nevery = \"1h\"\ncatch_up = \"1h\"\nhandler = \"rec\"\nlease_ttl = \"1500ms\"\n")
		expect.WaitFor(t, 10*time.Second, "run started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
		if _, err := st.Unlock(context.Background(), "u", "u", "alice", false); err != nil {
			t.Fatal(err)
		}
		e.ev.waitFor(t, 5*time.Second, "the run to end as unlocked", ended(driver.OutcomeUnlocked))
		if c := e.rec.snapshot()[0].cause; !errors.Is(c, lease.ErrRevoked) {
			t.Fatalf("cause %v, want lease.ErrRevoked", c)
		}
		expect.WaitFor(t, 5*time.Second, "the entity free, its run recorded", func() bool {
			es, err := st.Fleet().Entity(context.Background(), "u", "u")
			return err == nil && es.Held == nil && es.Last != nil && es.Last.Outcome == driver.OutcomeUnlocked
		})
	})
}

// leapClock moves 10s forward at every reading: a process frozen between any
// two of its steps, in particular between sending an acquire and reading the
// grant.
type leapClock struct{ n atomic.Int64 }

func (c *leapClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.n.Add(1)) * 10 * time.Second)
}

func TestRunNotStartedOnALeaseUntrustedOnArrival(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	st := e.redisStore("tickd", lease.Options{Replica: "frozen", Clock: &leapClock{}})
	st.InitEpoch(context.Background()) //nolint:errcheck
	e.run(lateTask, Options{Store: st})
	e.ev.waitFor(t, 10*time.Second, "the run to end as lease_lost", ended(driver.OutcomeLeaseLost))
	if n := e.rec.count(func(runRec) bool { return true }); n != 0 {
		t.Fatalf("the handler was called %d times on an untrusted lease", n)
	}
	if n := e.ev.count(func(ev Event) bool {
		return ev.Kind == EventRunEnded && errors.Is(ev.Err, tasks.ErrNotStarted) && errors.Is(ev.Err, lease.ErrUntrusted)
	}); n == 0 {
		t.Error("the run's end does not say it never began on an untrusted lease")
	}
	if e.logs.count("run ended", map[string]string{logs.KeyError: tasks.ErrNotStarted.Error() + ": " + lease.ErrUntrusted.Error()}) == 0 {
		t.Errorf("the run's end line does not say why:\n%s", e.logs)
	}
	// The run is handed over, not dropped: a healthy replica carries out the
	// tick's run (its tick is recorded as started, so as a retry of it).
	e.start(lateTask)
	expect.WaitFor(t, 20*time.Second, "the handed-over run", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Reason == "retry" && !r.Tick.IsZero() }) >= 1
	})
	if n := e.rec.count(func(r runRec) bool { return r.Reason == "tick" }); n != 0 {
		t.Fatalf("%d tick runs: the tick ran twice", n)
	}
}

func TestTimeoutWarnAndRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		if r.Reason == "tick" {
			<-ctx.Done() // runs into the timeout
			return tasks.Done, ctx.Err()
		}
		panic("boom") // the retry panics: a failure, not a crash
	}
	e.start(`
[[tasks]]
name = "slowpoke"
every = "1h"
catch_up = "1h"
handler = "rec"
timeout = "300ms"
warn_after = "100ms"
retries = 1
`)
	e.ev.waitFor(t, 10*time.Second, "the retry to fail", ended(driver.OutcomeFailed))
	if n := e.ev.count(func(ev Event) bool {
		return ev.Kind == EventRunEnded && ev.Reason == driver.ReasonRetry && errors.Is(ev.Err, tasks.ErrPanic)
	}); n != 1 {
		t.Errorf("%d retries ended with the handler's panic, want 1", n)
	}
	for _, want := range []struct {
		msg   string
		attrs map[string]string
	}{
		{"run still going", map[string]string{logs.KeyReason: "tick"}},
		{"run ended", map[string]string{logs.KeyOutcome: "timeout", "next": "retry"}},
		{"run ended", map[string]string{logs.KeyOutcome: "failed", logs.KeyReason: "retry"}},
	} {
		if e.logs.count(want.msg, want.attrs) != 1 {
			t.Errorf("no log line %q with %v", want.msg, want.attrs)
		}
	}
	if n := e.rec.count(func(runRec) bool { return true }); n != 2 {
		t.Fatalf("%d runs, want a run and one retry", n)
	}
	if c := e.rec.snapshot()[0].cause; !errors.Is(c, ErrTimeout) {
		t.Fatalf("cause %v", c)
	}
}

// TestUnlockDuringARunIsSaid: a run that ends before its holder noticed an
// operator's unlock cannot release (the lease is not its any more); its
// line says the lease was force-released and by whom, not "release
// failed".
func TestUnlockDuringARunIsSaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	finish, _, st := e.startOneRun("stuck", tasks.Done)
	if _, err := st.Unlock(context.Background(), "stuck", "stuck", "alice", true); err != nil {
		t.Fatal(err)
	}
	close(finish) // long before the next renewal (every 10s) could notice
	e.ev.waitFor(t, 10*time.Second, "the run's end", kind(EventRunEnded))
	expect.Equal(t, "lines saying who force-released the lease",
		e.logs.count("the lease was force-released during the run (tickd unlock); the run's outcome is not recorded", map[string]string{"unlocked_by": "alice"}), 1)
	expect.Equal(t, "bare 'release failed' lines", e.logs.count("release failed", nil), 0)
}

// TestRescheduleInAShardIsTakenAtOnce: a replica polls the due entries of
// its tasks' other shards as of its own (it announces them once it knows
// the count, at its first tick), not only in the read of every bucket
// every 50th poll (every second here): four reschedules of an entity in
// shard 3 run within 2s of the first run (4s without).
func TestRescheduleInAShardIsTakenAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	entity := ""
	for i := 0; entity == ""; i++ {
		if id := fmt.Sprint("e", i); driver.ShardOf(id, 4) == 3 {
			entity = id
		}
	}
	var mu sync.Mutex
	left := 5
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if left--; left > 0 {
			return tasks.Reschedule, nil
		}
		return tasks.Done, nil
	}
	e.start(`
[[tasks]]
name = "sharded"
every = "1h"
catch_up = "1h"
handler = "rec"
lease_ttl = "3s"
shards = 4
entities = ["` + entity + `"]
`)
	expect.WaitFor(t, 10*time.Second, "the first run", func() bool { return e.rec.count(func(runRec) bool { return true }) > 0 })
	first := time.Now()
	expect.WaitFor(t, 10*time.Second, "the chain drained", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return left <= 0
	})
	if took := time.Since(first); took > 2*time.Second {
		t.Fatalf("four reschedules in shard 3 took %v: its due entries were found only by the read of every bucket", took)
	}
}
