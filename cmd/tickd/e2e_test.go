package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

func entityList(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", fmt.Sprint("u", i))
	}
	return "[" + strings.Join(ids, ", ") + "]"
}

func TestCheckCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	tickdtest.WriteFile(t, good, "[[tasks]]\nname = \"a\"\nevery = \"15m\"\ncommand = [\"true\"]\n")
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"check", "-config", good}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if lines := strings.Count(out.String(), ":00Z") + strings.Count(out.String(), ":15:00Z") + strings.Count(out.String(), ":30:00Z") + strings.Count(out.String(), ":45:00Z"); lines < 5 {
		t.Fatalf("want 5 fire times:\n%s", out.String())
	}
	// A preview from any report.Instant, as a document: Berlin's spring-forward
	// day, the tick daylight saving moved marked.
	dst := filepath.Join(dir, "dst.toml")
	tickdtest.WriteFile(t, dst, "[[tasks]]\nname = \"a\"\ncron = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = [\"true\"]\n")
	code, js, errs := cli("check", "-config", dst, "-json", "-from", "2026-03-28T00:00:00Z", "-n", "3")
	expect.Equal(t, "check -json: exit status "+errs, code, 0)
	checkSchema(t, js)
	var doc report.CheckDoc
	if err := json.Unmarshal([]byte(js), &doc); err != nil || len(doc.Tasks) != 1 || len(doc.Tasks[0].Ticks) != 3 {
		t.Fatalf("check -json: %v %s", err, js)
	}
	ticks := doc.Tasks[0].Ticks
	expect.Equal(t, "the first tick", ticks[0].Tick.Time().UTC().Format(time.RFC3339), "2026-03-28T01:30:00Z")
	expect.Equal(t, "the moved tick", ticks[1].Tick.Time().UTC().Format(time.RFC3339), "2026-03-29T01:00:00Z")
	expect.Equal(t, "its local time", ticks[1].Local, "2026-03-29T03:00:00+02:00")
	expect.True(t, "marked as moved: "+ticks[1].DST, strings.Contains(ticks[1].DST, "spring forward"))
	expect.True(t, "the others unmarked", ticks[0].DST == "" && ticks[2].DST == "")
	_, text, _ := cli("check", "-config", dst, "-from", "2026-03-28T00:00:00Z", "-n", "3")
	expect.True(t, "the text marks it too:\n"+text, strings.Contains(text, "2026-03-29T03:00:00+02:00   <- moved by daylight saving"))
	if code, _, errs := cli("check", "-config", dst, "-from", "tomorrow"); code != 2 || !strings.Contains(errs, "-from") {
		t.Errorf("a bad -from: %d %s", code, errs)
	}

	bad := filepath.Join(dir, "bad.toml")
	tickdtest.WriteFile(t, bad, "[[tasks]]\nname = \"a\"\nevery = \"0s\"\ncommand = [\"true\"]\nretires = 2\n")
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"check", "-config", bad}, &out, &errb); code != 1 {
		t.Fatalf("exit %d for a bad config", code)
	}
	for _, want := range []string{bad + ":3: tasks[0].every: must be more than 0s", bad + ":5: tasks[0].retires: unknown key"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if code := run(context.Background(), []string{"nosuch"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
	// The [web] users are read by check and by run as the console reads
	// them (console.CheckUsers), said by file, line and key.
	noUsers := filepath.Join(dir, "nousers.toml")
	tickdtest.WriteFile(t, noUsers, fmt.Sprintf("[web]\nlisten = \"127.0.0.1:0\"\nhtpasswd_file = %q\n[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\n", filepath.Join(dir, "none")))
	for _, cmd := range []string{"check", "run"} {
		code, _, errs := cli(cmd, "-config", noUsers)
		expect.True(t, fmt.Sprintf("%s with a users' file that is not there: exit %d, %s", cmd, code, errs),
			code == 1 && strings.Contains(errs, noUsers+":3: web.htpasswd_file: open "+filepath.Join(dir, "none")))
	}

	// What would fail at run time on this host is warned about; the
	// config itself is valid, so check passes.
	missing := filepath.Join(dir, "missing.toml")
	tickdtest.WriteFile(t, missing, "[[tasks]]\nname = \"a\"\nevery = \"1m\"\nentities_file = \"/nonexistent/ids\"\ncommand = [\"no-such-program-x\"]\n")
	code, _, errs = cli("check", "-config", missing)
	expect.Equal(t, "check with a missing file and program: exit status", code, 0)
	expect.True(t, "warns about the entities_file: "+errs, strings.Contains(errs, "warning: "+missing+": tasks[0] (a): entities_file: open /nonexistent/ids: no such file or directory"))
	expect.True(t, "warns about the command: "+errs, strings.Contains(errs, `warning: `+missing+`: tasks[0] (a): command: exec: "no-such-program-x": executable file not found in $PATH`))

	// -redis also connects: a Redis that answers passes, one that does not
	// fails with one line.
	srv := redistest.Start(t)
	withRedis := filepath.Join(dir, "redis.toml")
	tickdtest.WriteFile(t, withRedis, "[redis]\nurl = \""+srv.URL()+"\"\n[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\n")
	code, stdout, errs := cli("check", "-config", withRedis, "-redis")
	expect.Equal(t, "check -redis with Redis up: exit status", code, 0)
	expect.True(t, "check -redis says Redis answers: "+stdout+errs, strings.Contains(stdout, "answers"))
	srv.Stop()
	code, stdout, errs = cli("check", "-config", withRedis, "-redis")
	expect.Equal(t, "check -redis with Redis down: exit status", code, 1)
	expect.Equal(t, "check -redis with Redis down: lines on stderr", strings.Count(errs, "\n"), 1)
	expect.True(t, "check -redis with Redis down does not say it answers: "+stdout, !strings.Contains(stdout, "answers"))
	code, stdout, _ = cli("check", "-config", withRedis, "-redis", "-json")
	expect.Equal(t, "check -redis -json with Redis down: exit status", code, 1)
	expect.True(t, "check -redis -json with Redis down: the error as a document: "+stdout, decodeJSON(t, stdout)["error"] != nil)
}

// replicaConfig is a config for the end-to-end tests: the test worker as the
// exec action, on a shared Redis.
func replicaConfig(redisURL, workerBin, extra string) string {
	return fmt.Sprintf(`
[daemon]
shutdown_timeout = "300ms"
log_format = "json"
log_level = "debug"

[redis]
url = %q
key_prefix = "e2e"

[[tasks]]
name = "work"
every = "1s"
command = [%q]
lease_ttl = "2s"
concurrency = 6
%s
`, redisURL, workerBin, extra)
}

func TestTwoProcessesNeverOverlap(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, replicaConfig(srv.URL(), worker, "entities = "+entityList(30)))
	logPath := filepath.Join(dir, "runs.log")
	env := []string{"TESTWORKER_LOG=" + logPath, "TESTWORKER_MAX_SLEEP=1500ms"}
	a := tickdtest.Start(t, "A", append(env, "X=a"), "run", "-config", cfg)
	b := tickdtest.Start(t, "B", env, "-config", cfg)
	// Fresh Redis: the data-loss quarantine (one lease_ttl) passes first.
	var runs []tickdtest.Run
	expect.Within(30*time.Second, func() bool {
		runs = tickdtest.ReadRuns(t, logPath)
		return len(runs) >= 150
	})
	a.Signal(syscall.SIGTERM)
	b.Signal(syscall.SIGTERM)
	if ca, cb := a.Wait(20*time.Second), b.Wait(20*time.Second); ca != 0 || cb != 0 {
		t.Fatalf("exit codes %d %d", ca, cb)
	}
	runs = tickdtest.ReadRuns(t, logPath)
	f := tickdtest.Check(runs, tickdtest.OpenEndByLog(tickdtest.LoggedEnds(tickdtest.Logs(a, b)), time.Now()))
	t.Logf("figures: %s", f)
	if f.Runs < 150 {
		t.Fatalf("only %d runs", f.Runs)
	}
	expect.Equal(t, "overlaps", f.Overlaps, 0)
	expect.Equal(t, "duplicate tick runs", f.DuplicateTickRuns, 0)
	expect.Equal(t, "fence violations", f.FenceViolations, 0)
	if t.Failed() {
		t.Fatal(strings.Join(f.Examples, "\n"))
	}
	if !strings.Contains(a.Log(), `"msg":"run ended"`) || !strings.Contains(b.Log(), `"msg":"run ended"`) {
		t.Fatal("one replica ran nothing")
	}
	// The worker's stdout reached the log with the run's attributes.
	if !strings.Contains(a.Log()+b.Log(), `"msg":"working on u`) {
		t.Fatal("exec output not logged")
	}
	// Graceful stops left no lease behind, and said nothing at ERROR: the
	// history was written (a stop used to log "cannot write the history;
	// will retry: context canceled" for records it then wrote).
	if hs := tickdtest.HeldLeases(t, srv.Addr, "e2e"); len(hs) != 0 {
		t.Fatalf("stray leases: %+v", hs)
	}
	for _, p := range []*tickdtest.Proc{a, b} {
		for _, l := range strings.Split(p.Log(), "\n") {
			if strings.Contains(l, `"level":"ERROR"`) {
				t.Errorf("%s logged at ERROR in a clean stop: %s", p.Name, l)
			}
		}
	}
}

func TestSIGTERMReleasesAndHandsOver(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tickdtest.InitEpoch(t, srv.Addr, "e2e")
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, replicaConfig(srv.URL(), worker, `entities = ["x", "y"]`+"\ncatch_up = \"1m\""))
	logPath := filepath.Join(dir, "runs.log")
	env := []string{"TESTWORKER_LOG=" + logPath, "TESTWORKER_MAX_SLEEP=1h"}
	a := tickdtest.Start(t, "A", env, "-config", cfg)
	expect.WaitFor(t, 30*time.Second, "both runs", func() bool { return len(tickdtest.ReadRuns(t, logPath)) >= 2 })
	a.Signal(syscall.SIGTERM)
	if code := a.Wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The children were stopped (SIGTERM reached them) and recorded an end.
	for _, r := range tickdtest.ReadRuns(t, logPath) {
		if r.End.Signal != "terminated" {
			t.Fatalf("run %+v was not stopped by SIGTERM", r)
		}
	}
	if hs := tickdtest.HeldLeases(t, srv.Addr, "e2e"); len(hs) != 0 {
		t.Fatalf("leases left: %+v", hs)
	}
	if n := tickdtest.DueCount(t, srv.Addr, "e2e"); n != 2 {
		t.Fatalf("%d hand-over entries, want 2", n)
	}
	if !strings.Contains(a.Log(), `"outcome":"canceled"`) || !strings.Contains(a.Log(), `"msg":"tickd stopped"`) {
		t.Fatal("shutdown not logged")
	}
	// Another replica carries the handed-over runs out: as retries, or, when
	// B's catch-up tick took an entity's lease first, as the follow-up the
	// retry then became (it runs right after, with the retry's tick).
	handedOver := map[string]string{}
	for _, r := range tickdtest.ReadRuns(t, logPath) {
		handedOver[r.Start.Entity] = r.Start.Tick
	}
	tickdtest.Start(t, "B", []string{"TESTWORKER_LOG=" + logPath}, "-config", cfg)
	expect.WaitFor(t, 30*time.Second, "B runs the handed-over runs", func() bool {
		ran := map[string]bool{}
		for _, r := range tickdtest.ReadRuns(t, logPath) {
			if r.Start.Reason == "retry" || r.Start.Reason == "queued" && r.Start.Tick >= handedOver[r.Start.Entity] {
				ran[r.Start.Entity] = true
			}
		}
		return ran["x"] && ran["y"]
	})
}

func TestSIGHUPReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	metrics := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	task := func(name string) string {
		return fmt.Sprintf("[daemon]\nlog_format = \"json\"\nmetrics_addr = %q\n[[tasks]]\nname = %q\nevery = \"1s\"\ncommand = [\"echo\", \"ran-%s\"]\n", metrics, name, name)
	}
	reloadOK := func(v string) func() bool {
		return func() bool {
			_, m := get(t, "http://"+metrics+"/metrics")
			return strings.Contains(m, "\ntickd_config_last_reload_successful "+v+"\n")
		}
	}
	tickdtest.WriteFile(t, cfg, task("first"))
	p := tickdtest.Start(t, "A", nil, "-config", cfg)
	p.WaitLog(10*time.Second, `"msg":"ran-first"`)
	expect.WaitFor(t, 10*time.Second, "tickd_config_last_reload_successful 1", reloadOK("1"))
	tickdtest.WriteFile(t, cfg, task("second"))
	p.Signal(syscall.SIGHUP)
	p.WaitNotify(10*time.Second, "READY=1", 2) // ready again after the reload
	p.WaitLog(10*time.Second, `"msg":"ran-second"`)
	// A bad file is reported; the old config keeps running.
	tickdtest.WriteFile(t, cfg, "[[tasks]]\nname = \"x\"\nevery = \"nope\"\n")
	p.Signal(syscall.SIGHUP)
	// An operator's alert sees it: the reload metric drops to 0.
	expect.WaitFor(t, 10*time.Second, "tickd_config_last_reload_successful 0", reloadOK("0"))
	p.WaitLog(10*time.Second, `"msg":"reload failed: the old config keeps running"`)
	n := strings.Count(p.Log(), `"msg":"ran-second"`)
	expect.WaitFor(t, 10*time.Second, "second keeps running", func() bool { return strings.Count(p.Log(), `"msg":"ran-second"`) > n+1 })
	log := p.Log()
	after := log[strings.Index(log, `"msg":"config reloaded"`):]
	if strings.Contains(after, `"msg":"ran-first"`) && strings.Count(after, `"msg":"ran-first"`) > 1 {
		t.Fatalf("removed task still runs after the reload")
	}
	if !strings.Contains(log, `"added":["second"],"removed":["first"],"changed":[]`) {
		t.Fatalf("the reload line's lists (empty ones as []):\n%s", log)
	}
	if !strings.Contains(log, `tickd.toml:3: tasks[0].every: bad duration`) {
		t.Fatalf("reload error does not name file and line")
	}
	p.Signal(syscall.SIGINT)
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestExampleConfigRuns(t *testing.T) {
	t.Parallel()
	// The README's first command: the example config shows output within report.Seconds.
	p := tickdtest.Start(t, "example", nil, "-config", filepath.Join("..", "..", "config.example.toml"))
	p.WaitLog(10*time.Second, "syncing alice for tick")
	p.WaitLog(10*time.Second, `"reason":"reschedule"`)
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestPasswordNeverLogged(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Password: "s3cret-pw"})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	wrong := strings.Replace(srv.URL(), "s3cret-pw", "wr0ng-pw", 1)
	tickdtest.WriteFile(t, cfg, replicaConfig(wrong, "true", ""))
	p := tickdtest.Start(t, "A", nil, "-config", cfg)
	p.WaitLog(15*time.Second, "redis unreachable")
	p.Signal(syscall.SIGTERM)
	p.Wait(10 * time.Second)
	if strings.Contains(p.Log(), "wr0ng-pw") {
		t.Fatalf("password in logs:\n%s", p.Log())
	}
	if !strings.Contains(p.Log(), "WRONGPASS") && !strings.Contains(p.Log(), "invalid") {
		t.Fatalf("wrong password not reported:\n%s", p.Log())
	}
}

func TestMain(m *testing.M) {
	// check's in-process runs read no unit of this host (a package test
	// may install one meanwhile); TestCheckWarnsOfAUnitThatKillsTheStop
	// gives its own.
	unitDirs = nil
	flag.Parse()
	// The tests mostly wait for real processes' ticks: up to four at once.
	tier.Parallel(4)
	os.Exit(tickdtest.Main(m))
}

func TestSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	logPath := filepath.Join(dir, "runs.log")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf("[daemon]\nshutdown_timeout = \"1m\"\nlog_format = \"json\"\n[[tasks]]\nname = \"long\"\nevery = \"1h\"\ncatch_up = \"1h\"\ncommand = [%q, \"1h\"]\n", worker))
	p := tickdtest.Start(t, "A", []string{"TESTWORKER_LOG=" + logPath}, "-config", cfg)
	expect.WaitFor(t, 10*time.Second, "worker running", func() bool { return len(tickdtest.ReadRuns(t, logPath)) == 1 })
	p.Signal(syscall.SIGTERM)
	p.WaitNotify(10*time.Second, "STOPPING=1", 1)
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(5 * time.Second); code != 1 {
		t.Fatalf("exit %d after a second signal, want 1", code)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v to exit", d)
	}
	if !strings.Contains(p.Log(), "second signal: exiting at once") {
		t.Fatal("second signal not logged")
	}
	// The run's process died with tickd (Pdeathsig).
	pid := tickdtest.ReadRuns(t, logPath)[0].Start.Pid
	expect.WaitFor(t, 5*time.Second, "worker gone", func() bool { return syscall.Kill(pid, 0) != nil })
}

// TestSIGTERMDuringStartUp: a SIGTERM that arrives while tickd is still
// starting stops it cleanly, exit 0, instead of killing it with the
// signal's default action. tickd is provably in its own start-up code when
// the signal is sent: a replica of the same id, frozen (SIGSTOP), still
// announces it, so the new process waits (up to about 10s) to see whether
// that one is alive, after it connected to Redis (its connection is seen in
// CLIENT LIST) and before it is ready. (A FIFO at the config path held it
// before; config files are now never waited on.)
func TestSIGTERMDuringStartUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tickdtest.InitEpoch(t, srv.Addr, "tickd")
	cfg := filepath.Join(t.TempDir(), "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf("[daemon]\nlog_format = \"json\"\n[redis]\nurl = %q\n[[tasks]]\nname = \"t\"\nevery = \"1h\"\ncommand = [\"true\"]\n", srv.URL()))
	env := []string{"TICKD_REPLICA_ID=same"}
	frozen := tickdtest.Start(t, "frozen", env, "-config", cfg)
	frozen.WaitReady(20 * time.Second)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	expect.WaitFor(t, 10*time.Second, "the first process's announcement", func() bool {
		return c.HExists(context.Background(), "tickd:replicas", "same").Val()
	})
	frozen.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { frozen.Signal(syscall.SIGCONT) })
	clients := func() int {
		l, err := c.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(l, "\n")
	}
	for round := range 3 {
		before := clients()
		p := tickdtest.Start(t, fmt.Sprint("A", round), env, "-config", cfg)
		expect.WaitFor(t, 10*time.Second, "the new process connected to Redis", func() bool { return clients() > before })
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(20 * time.Second); code != 0 {
			t.Fatalf("round %d: exit %d (-1: killed by the signal), want 0", round, code)
		}
		expect.True(t, fmt.Sprintf("round %d: stopped during start-up, never ready", round), !strings.Contains(p.Log(), `"msg":"tickd started"`))
	}
}

// TestSIGTERMRightAfterExec: a SIGTERM that comes as soon as tickd's first
// package is initialized (internal/earlysignal, which takes the signals),
// while the others still are, stops tickd cleanly (exit 0); and no package
// does slow work at init (a bcrypt hash made at init held every command up
// by 87ms, and a SIGTERM up to 100ms after exec killed tickd). The moment
// is the runtime's own report (GODEBUG=inittrace=1), not a guess of time:
// about 8ms after exec here, 20ms or more on a loaded machine. A package's
// init is judged by its fastest of the three rounds: slow work is slow in
// each, while a loaded machine stretched one round's 4ms to 31ms.
func TestSIGTERMRightAfterExec(t *testing.T) {
	t.Parallel()
	fastest := map[string]float64{} // package -> its fastest init, ms of clock
	lines := map[string]string{}    // package -> its fastest init's line
	bin, _ := tickdtest.Binaries(t)
	cfg := filepath.Join(t.TempDir(), "tickd.toml")
	tickdtest.WriteFile(t, cfg, "[daemon]\nlog_format = \"json\"\n[[tasks]]\nname = \"t\"\nevery = \"1h\"\ncommand = [\"true\"]\n")
	for round := range 3 {
		cmd := exec.Command(bin, "run", "-config", cfg)
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stderr)
		var inits []string
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "init ") {
				inits = append(inits, line)
			}
			if !signalled && strings.HasPrefix(line, "init github.com/tickd/tickd/internal/earlysignal ") {
				cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
				signalled = true
			}
		}
		cmd.Wait() //nolint:errcheck // the exit status is what is checked
		if !signalled {
			t.Fatalf("round %d: internal/earlysignal was never initialized", round)
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("round %d: SIGTERM right after internal/earlysignal's init: exit %d (-1: killed by the signal), want 0", round, code)
		}
		for _, l := range inits { // "init PKG @T ms, C ms clock, …"
			f := strings.Fields(l)
			if len(f) > 4 {
				if ms, err := strconv.ParseFloat(f[4], 64); err == nil {
					if least, ok := fastest[f[1]]; !ok || ms < least {
						fastest[f[1]], lines[f[1]] = ms, l
					}
				}
			}
		}
	}
	for pkg, ms := range fastest {
		if ms > 20 {
			t.Errorf("a package does slow work at init, in each of three starts: %s", lines[pkg])
		}
	}
}

// TestOnlyJSONLinesWhileRedisIsUnreachable: while Redis cannot be reached,
// go-redis's own complaints come through tickd's logger, as JSON and
// rate-limited, instead of "redis: 2026/…" lines several times a second
// that break the stream for journald and collectors.
func TestOnlyJSONLinesWhileRedisIsUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String() // nothing listens here once l is closed
	l.Close()
	cfg := filepath.Join(t.TempDir(), "tickd.toml")
	tickdtest.WriteFile(t, cfg, replicaConfig("redis://"+closed+"/0", "true", ""))
	p := tickdtest.Start(t, "A", nil, "-config", cfg)
	p.WaitLog(20*time.Second, `"msg":"redis client: connection pool: failed to dial`)
	started := time.Now()
	expect.WaitFor(t, 20*time.Second, "two more acquire rounds to fail", func() bool {
		return strings.Count(p.Log(), `"msg":"cannot acquire leases; retrying"`) >= 1 && time.Since(started) > 3*time.Second
	})
	p.Signal(syscall.SIGTERM)
	p.Wait(10 * time.Second)
	lines := strings.Split(strings.TrimSpace(p.Log()), "\n")
	clientLines := 0
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", line)
			continue
		}
		if strings.HasPrefix(fmt.Sprint(rec["msg"]), "redis client:") {
			clientLines++
		}
	}
	if clientLines > 2 {
		t.Errorf("%d go-redis lines in %d lines: not rate-limited (one per %v)", clientLines, len(lines), logs.Every)
	}
}

// TestWatchConfigFollowsAConfigMapSwap: with watch_config, a config
// mounted as Kubernetes mounts a ConfigMap (config.toml -> ..data/config.toml,
// ..data -> a dated directory) is reloaded when ..data is swapped, with no
// signal, by the rules of SIGHUP: a bad one is refused and the old config
// runs on.
func TestWatchConfigFollowsAConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	metrics := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	task := func(name string) string {
		return fmt.Sprintf("[daemon]\nlog_format = \"json\"\nwatch_config = true\nmetrics_addr = %q\n[[tasks]]\nname = %q\nevery = \"1s\"\ncommand = [\"echo\", \"ran-%s\"]\n", metrics, name, name)
	}
	// swap writes a new dated directory and points ..data at it in one
	// rename, as the kubelet does.
	version := 0
	swap := func(content string) {
		version++
		dated := fmt.Sprintf("..2026_11_26_%d", version)
		if err := os.Mkdir(filepath.Join(dir, dated), 0o755); err != nil {
			t.Fatal(err)
		}
		tickdtest.WriteFile(t, filepath.Join(dir, dated, "config.toml"), content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(dated, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(task("first"))
	cfg := filepath.Join(dir, "config.toml")
	if err := os.Symlink(filepath.Join("..data", "config.toml"), cfg); err != nil {
		t.Fatal(err)
	}
	p := tickdtest.Start(t, "A", nil, "-config", cfg)
	p.WaitLog(10*time.Second, `"msg":"ran-first"`)
	swap(task("second"))
	p.WaitNotify(10*time.Second, "READY=1", 2) // ready again after the reload
	p.WaitLog(10*time.Second, `"msg":"ran-second"`)
	swap("[[tasks]]\nname = \"x\"\nevery = \"nope\"\n")
	expect.WaitFor(t, 10*time.Second, "tickd_config_last_reload_successful 0", func() bool {
		_, m := get(t, "http://"+metrics+"/metrics")
		return strings.Contains(m, "\ntickd_config_last_reload_successful 0\n")
	})
	n := strings.Count(p.Log(), `"msg":"ran-second"`)
	expect.WaitFor(t, 10*time.Second, "second keeps running", func() bool { return strings.Count(p.Log(), `"msg":"ran-second"`) > n+1 })
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestKillTakesTheScriptsChildren: a task whose command is a script that
// runs its work in a child (sh running the worker in the background and
// waiting for it, as a script runs curl or a subshell). tickd is killed -9,
// without systemd: the script dies by Pdeathsig and the worker, its child,
// by tickd's guardian (internal/proc), within a second; another replica
// then runs the entities, and none of its runs overlaps the killed one's.
func TestKillTakesTheScriptsChildren(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tickdtest.InitEpoch(t, srv.Addr, "e2e")
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[daemon]
log_format = "json"
shutdown_timeout = "300ms"
[redis]
url = %q
key_prefix = "e2e"
[[tasks]]
name = "script"
every = "2s"
lease_ttl = "2s"
command = ["sh", "-c", "\"$0\" 20s & wait", %q]
entities = ["a", "b", "c"]
`, srv.URL(), worker))
	logPath := filepath.Join(dir, "runs.log")
	env := []string{"TESTWORKER_LOG=" + logPath}
	a := tickdtest.Start(t, "A", env, "-config", cfg)
	var runs []tickdtest.Run
	expect.WaitFor(t, 15*time.Second, "the three scripts' workers started", func() bool {
		runs = tickdtest.ReadRuns(t, logPath)
		return len(runs) == 3
	})
	// Each worker is the script's child, not tickd's.
	for _, r := range runs {
		expect.True(t, fmt.Sprintf("worker %d is a child of the script, not of tickd (%d)", r.Start.Pid, a.Pid()), r.Start.Ppid != a.Pid())
		t.Cleanup(func() { syscall.Kill(r.Start.Pid, syscall.SIGKILL) }) //nolint:errcheck // gone, unless the test failed
	}
	a.Signal(syscall.SIGKILL)
	a.Wait(5 * time.Second)
	killed := time.Now()
	alive := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && !strings.Contains(string(b), ") Z ")
	}
	expect.WaitFor(t, 5*time.Second, "the killed replica's workers gone", func() bool {
		for _, r := range runs {
			if alive(r.Start.Pid) {
				return false
			}
		}
		return true
	})
	gone := time.Now()
	if d := gone.Sub(killed); d > time.Second {
		t.Errorf("the script's children outlived the kill of tickd by %v, want at most 1s", d)
	}
	b := tickdtest.Start(t, "B", env, "-config", cfg)
	expect.WaitFor(t, 20*time.Second, "the other replica's runs of the three entities", func() bool {
		return len(tickdtest.ReadRuns(t, logPath)) == 6
	})
	for _, r := range tickdtest.ReadRuns(t, logPath)[3:] {
		expect.True(t, fmt.Sprintf("B's run of %s started after A's workers were gone", r.Start.Entity), r.Start.At > gone.UnixNano())
	}
	for _, r := range tickdtest.ReadRuns(t, logPath)[:3] {
		expect.Equal(t, fmt.Sprintf("A's run of %s has no end: its worker was killed", r.Start.Entity), r.End.Event, "")
	}
	b.Signal(syscall.SIGTERM)
	expect.Equal(t, "B's exit status", b.Wait(10*time.Second), 0)
}
