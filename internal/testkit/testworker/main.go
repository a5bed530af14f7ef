// Command testworker is the exec action of tickd's end-to-end and fault
// tests. It appends a "start" and an "end" record (JSON lines, one write
// each) to the file named by TESTWORKER_LOG, with the TICKD_* environment,
// its pid and timestamps; sleeps (its first argument, or TESTWORKER_SLOW_SLEEP
// for the entities listed in TESTWORKER_SLOW, or a random time up to
// TESTWORKER_MAX_SLEEP), and, told to stop by SIGTERM, goes on for
// TESTWORKER_TERM_DELAY before it exits (an entity listed in
// TESTWORKER_IGNORE_TERM never does: SIGKILL ends it);
// and, if TESTWORKER_WORK_DIR holds a counter file named after the entity,
// decrements it and exits with the reschedule code (75) while work is left;
// exits 1 (failed) for the entities listed in TESTWORKER_FAIL, but for a
// reschedule's run;
// and, with TESTWORKER_SINK set to a fence sink's line address
// (cmd/tickd/internal/fencesink; its client's binary TESTWORKER_SINK_BIN),
// for the entities TESTWORKER_SINK_ONLY lists (or all), writes through
// its fence guards when it starts, every TESTWORKER_SINK_EVERY while it
// sleeps (a "write" record each), and when it ends (stopped by SIGTERM
// too), and records what each guard did in the record (Guards);
// and, with TESTWORKER_ORPHAN set to a duration, starts a copy of itself in a
// session of its own that outlives it by that long (a command that leaves a
// daemon behind) and then appends its pid to TESTWORKER_LOG.orphans: in a
// container, tickd as PID 1 must reap it.
package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tickd/tickd/internal/testkit/workerlog"
)

// orphanEnv, in a copy's environment, is how long it sleeps as an orphan.
const orphanEnv = "TESTWORKER_AS_ORPHAN"

func main() {
	logPath := os.Getenv("TESTWORKER_LOG")
	if d, err := time.ParseDuration(os.Getenv(orphanEnv)); err == nil {
		time.Sleep(d)
		appendLine(logPath+".orphans", strconv.Itoa(os.Getpid()))
		return
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(2)
	}
	fence, _ := strconv.ParseInt(os.Getenv("TICKD_FENCE"), 10, 64)
	rec := workerlog.Record{Task: os.Getenv("TICKD_TASK"), Entity: os.Getenv("TICKD_ENTITY"), Tick: os.Getenv("TICKD_TICK"),
		Fence: fence, Reason: os.Getenv("TICKD_REASON"), Pid: os.Getpid(), Ppid: os.Getppid(), Traceparent: os.Getenv("TRACEPARENT")}
	write := func(event string, exit int, sig string) {
		r := rec
		if sinkWrites(rec.Entity) {
			r.GuardAt, r.Guards = time.Now().UnixNano(), guarded(rec)
		}
		r.Event, r.At, r.Exit, r.Signal = event, time.Now().UnixNano(), exit, sig
		b, _ := json.Marshal(r)
		f.Write(append(b, '\n')) //nolint:errcheck // O_APPEND: one write, one line
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	write("start", 0, "")
	fmt.Printf("working on %s\n", rec.Entity)

	// A fixed sleep as the first argument, else a random one up to
	// TESTWORKER_MAX_SLEEP.
	var sleep time.Duration
	if len(os.Args) > 1 {
		sleep, _ = time.ParseDuration(os.Args[1])
	} else if slow := os.Getenv("TESTWORKER_SLOW"); slow != "" && strings.Contains(","+slow+",", ","+rec.Entity+",") {
		sleep, _ = time.ParseDuration(os.Getenv("TESTWORKER_SLOW_SLEEP"))
	} else if maxSleep, _ := time.ParseDuration(os.Getenv("TESTWORKER_MAX_SLEEP")); maxSleep > 0 {
		sleep = time.Duration(rand.Int64N(int64(maxSleep)))
	}
	if sleep > 0 {
		sleepOrStop(rec, sleep, sigs, write)
	}
	exit := 0
	if dir := os.Getenv("TESTWORKER_WORK_DIR"); dir != "" {
		p := filepath.Join(dir, rec.Entity)
		if b, err := os.ReadFile(p); err == nil {
			n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if n > 0 {
				n--
				os.WriteFile(p, []byte(strconv.Itoa(n)), 0o644) //nolint:errcheck
				if n > 0 {
					exit = 75
				}
			}
		}
	}
	if fail := os.Getenv("TESTWORKER_FAIL"); fail != "" && exit == 0 && rec.Reason != "reschedule" && strings.Contains(","+fail+",", ","+rec.Entity+",") {
		exit = 1 // a run of these entities' ticks fails (a reschedule's does not: its tick's work is done)
	}
	if d := os.Getenv("TESTWORKER_ORPHAN"); d != "" {
		leaveOrphan(d)
	}
	write("end", exit, "")
	os.Exit(exit)
}

// sleepOrStop sleeps for d, writing through the fence sink's guards
// every TESTWORKER_SINK_EVERY meanwhile (a "write" record each: a run that
// writes as it goes), or, told to stop by SIGTERM, exits as it is told
// (see the package's doc).
func sleepOrStop(rec workerlog.Record, d time.Duration, sigs chan os.Signal, write func(event string, exit int, sig string)) {
	var every <-chan time.Time
	if e, _ := time.ParseDuration(os.Getenv("TESTWORKER_SINK_EVERY")); e > 0 && sinkWrites(rec.Entity) {
		tk := time.NewTicker(e)
		defer tk.Stop()
		every = tk.C
	}
	done := time.After(d)
	for {
		select {
		case <-done:
			return
		case <-every:
			write("write", 0, "")
		case s := <-sigs:
			if ignore := os.Getenv("TESTWORKER_IGNORE_TERM"); strings.Contains(","+ignore+",", ","+rec.Entity+",") {
				select {} // a worker that does not stop: SIGKILL ends it
			}
			// A worker that takes a while to stop (TESTWORKER_TERM_DELAY).
			t, _ := time.ParseDuration(os.Getenv("TESTWORKER_TERM_DELAY"))
			time.Sleep(t)
			write("end", 143, s.String())
			os.Exit(143)
		}
	}
}

// sinkWrites says whether entity's runs write through the fence sink's
// guards: with a sink, those listed in TESTWORKER_SINK_ONLY, or all.
func sinkWrites(entity string) bool {
	only := os.Getenv("TESTWORKER_SINK_ONLY")
	return os.Getenv("TESTWORKER_SINK") != "" && (only == "" || strings.Contains(","+only+",", ","+entity+","))
}

// guarded writes rec's run through the fence sink's guards and says
// what each did. The sink's client (internal/testkit/sinkclient, its
// binary TESTWORKER_SINK_BIN) makes the call: this worker, which the fault suite starts a
// hundred times a second, links no network package, which would make
// every start slower.
func guarded(rec workerlog.Record) map[string]string {
	out := map[string]string{}
	cmd := exec.Command(os.Getenv("TESTWORKER_SINK_BIN"), os.Getenv("TESTWORKER_SINK"),
		strconv.FormatInt(rec.Fence, 10), rec.Task, rec.Entity)
	b, err := cmd.Output()
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		return map[string]string{"sink": "error: " + err.Error()}
	}
	return out
}

// leaveOrphan starts a copy of this worker, in a session of its own, that
// sleeps d once this one has ended.
func leaveOrphan(d string) {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		return
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), orphanEnv+"="+d)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
	}
}

// appendLine appends line to the file at path, in one write.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		return
	}
	defer f.Close()
	f.WriteString(line + "\n") //nolint:errcheck // O_APPEND: one write, one line
}
