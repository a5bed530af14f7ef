// Package tickdtest builds the tickd binary and the test worker, runs real
// tickd replica processes, and checks the records the worker leaves: the
// shared harness of the end-to-end and fault tests.
package tickdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/internal/testkit/timedtests"
	"github.com/tickd/tickd/internal/testkit/workerlog"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// repoRoot is the module root, found from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Main runs a package's tests (call it from TestMain), never at the same
// time as another package that judges timing (internal/testkit/timedtests), and
// then removes the binaries Binaries built, so a test run leaves nothing
// in the temp dir.
func Main(m *testing.M) int {
	code := timedtests.Run(m)
	if buildDir != "" {
		os.RemoveAll(buildDir) //nolint:errcheck // best effort, in the temp dir
	}
	return code
}

// TestClockEnv shifts the wall clock of a tickd built with the
// tickd_testclock tag (a Go binary's clock cannot be shifted from outside):
// Start runs that build for a process given it. The binaries users run
// do not read it.
const TestClockEnv = "TICKD_TEST_CLOCK_OFFSET"

var (
	testClockOnce sync.Once
	testClockErr  error
)

// testClockBinary builds, once, tickd with the tickd_testclock tag.
func testClockBinary(t testing.TB) string {
	t.Helper()
	Binaries(t) // the build dir
	bin := filepath.Join(buildDir, "tickd-testclock")
	testClockOnce.Do(func() {
		testClockErr = goBuild(bin, "./cmd/tickd", "-tags", "tickd_testclock")
	})
	if testClockErr != nil {
		expect.Fatalf(t, "%v", testClockErr)
	}
	return bin
}

// goBuild builds pkg into out (a file, or a directory) with flags, static
// as the README builds it.
func goBuild(out, pkg string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// Binaries builds tickd and testworker once per test binary and returns
// their paths. Packages that call it run their tests with Main.
func Binaries(t testing.TB) (tickd, worker string) {
	t.Helper()
	if err := build(); err != nil {
		expect.Fatalf(t, "%v", err)
	}
	return filepath.Join(buildDir, "tickd"), filepath.Join(buildDir, "testworker")
}

// build builds the binaries, once.
func build() error {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tickdtest-bin")
		if buildErr != nil {
			return
		}
		for _, pkg := range []string{"./cmd/tickd", "./internal/testkit/testworker"} {
			if buildErr = goBuild(buildDir, pkg); buildErr != nil {
				return
			}
		}
	})
	return buildErr
}

// Proc is one running tickd process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	t    testing.TB

	mu     sync.Mutex
	log    bytes.Buffer
	notes  []string // what it told its NOTIFY_SOCKET (READY=1, RELOADING=1, STOPPING=1…)
	exited chan struct{}
	err    error
}

// Start runs `tickd args...` with extra environment; its stderr (the log)
// is collected. It is killed when the test ends if still running.
func Start(t testing.TB, name string, env []string, args ...string) *Proc {
	t.Helper()
	bin, _ := Binaries(t)
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, TestClockEnv+"=") }) {
		bin = testClockBinary(t)
	}
	p := &Proc{Name: name, t: t, exited: make(chan struct{})}
	recapOnce(t)
	p.cmd = exec.Command(bin, args...)
	sock := p.listenNotify(t)
	p.cmd.Env = append(append(os.Environ(), "NOTIFY_SOCKET="+sock), env...) // env may bring its own
	pr, pw, err := os.Pipe()
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		expect.Fatalf(t, "%v", err)
	}
	pw.Close()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.Write(sc.Bytes())
			p.log.WriteByte('\n')
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			p.cmd.Process.Kill() //nolint:errcheck
			<-p.exited
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, p.Log())
		}
	})
	return p
}

// recapped holds the tests whose failures are repeated after their logs.
var recapped sync.Map

// recapOnce has a failing test say again, once and last (after every
// process's log, printed when the test ends), what it failed on: an
// excerpt of a long output's tail still names the failure.
func recapOnce(t testing.TB) {
	if _, loaded := recapped.LoadOrStore(t, true); loaded {
		return
	}
	t.Cleanup(func() {
		recapped.Delete(t)
		if msgs := expect.Failures(t); t.Failed() && len(msgs) > 0 {
			t.Logf("%s failed on (said again after the logs):\n\t%s", t.Name(), strings.Join(msgs, "\n\t"))
		}
	})
}

// listenNotify listens where the process sends its sd_notify states, as
// systemd's NOTIFY_SOCKET, so that tests wait on its readiness rather than
// on its log's wording. The socket's path is short: a unix socket's is
// limited to 108 bytes.
func (p *Proc) listenNotify(t testing.TB) string {
	dir, err := os.MkdirTemp("", "tickdn")
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	sock := filepath.Join(dir, "s")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	t.Cleanup(func() { conn.Close(); os.RemoveAll(dir) })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			p.mu.Lock()
			p.notes = append(p.notes, strings.Split(strings.TrimSpace(string(buf[:n])), "\n")...)
			p.mu.Unlock()
		}
	}()
	return sock
}

// WaitNotify waits until the process has sent state (e.g. "READY=1") n
// times in all: READY=1 once started, again after each reload.
func (p *Proc) WaitNotify(d time.Duration, state string, n int) {
	p.t.Helper()
	expect.WaitFor(p.t, d, fmt.Sprintf("%s to notify %s (%d)", p.Name, state, n), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		got := 0
		for _, s := range p.notes {
			if s == state {
				got++
			}
		}
		return got >= n
	})
}

// WaitReady waits until the process says it is ready (READY=1): its config
// is loaded and its tasks are ticking.
func (p *Proc) WaitReady(d time.Duration) { p.WaitNotify(d, "READY=1", 1) }

// Log returns what the process logged so far.
func (p *Proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig.
func (p *Proc) Signal(sig syscall.Signal) {
	p.cmd.Process.Signal(sig) //nolint:errcheck
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Wait waits up to d for the process to exit and returns its exit code.
func (p *Proc) Wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		log := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
		expect.Fatalf(p.t, "%s did not exit within %v; its log ends:\n%s", p.Name, d, strings.Join(log[max(len(log)-8, 0):], "\n"))
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// WaitLog waits until the log contains s.
func (p *Proc) WaitLog(d time.Duration, s string) {
	p.t.Helper()
	expect.WaitFor(p.t, d, fmt.Sprintf("%s to log %q", p.Name, s), func() bool { return strings.Contains(p.Log(), s) })
}

// Record is one line the test worker writes.
type Record = workerlog.Record

// Run is a start record paired with its end record (End is zero when the
// run never ended: its process was killed), and the writes it made through
// the fence guards as it went (TESTWORKER_SINK_EVERY), in order.
type Run struct {
	Start, End Record
	Writes     []Record
}

// ReadRuns reads the worker's log and pairs starts with ends (and the
// writes between) by pid.
func ReadRuns(t testing.TB, path string) []Run {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		expect.Fatalf(t, "%v", err)
	}
	// A record still being appended may show as a last line without its
	// newline (a reader can see the first page of a write that crosses a
	// page boundary): it is read next time.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	byPid := map[int]int{}
	var runs []Run
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			expect.Fatalf(t, "bad record %q: %v", line, err)
		}
		switch r.Event {
		case "start":
			byPid[r.Pid] = len(runs)
			runs = append(runs, Run{Start: r})
		case "end":
			if i, ok := byPid[r.Pid]; ok {
				runs[i].End = r
			}
		case "write":
			if i, ok := byPid[r.Pid]; ok {
				runs[i].Writes = append(runs[i].Writes, r)
			}
		}
	}
	return runs
}

// WriteFile writes a file for the test.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		expect.Fatalf(t, "%v", err)
	}
}

// HeldLeases lists the leases held in the Redis at addr under prefix, read
// as tickd status reads them.
func HeldLeases(t testing.TB, addr, prefix string) []driver.Held {
	t.Helper()
	s := store(t, addr, prefix)
	defer s.Stop(context.Background())
	return HeldLeasesIn(t, s)
}

// HeldLeasesIn lists the leases held in s, read as tickd status reads them.
func HeldLeasesIn(t testing.TB, s *lease.Store) []driver.Held {
	t.Helper()
	var hs []driver.Held
	if err := s.Fleet().Leases(context.Background(), "", func(h driver.Held) error { hs = append(hs, h); return nil }); err != nil {
		t.Errorf("read leases: %v", err)
	}
	return hs
}

// Ticks reads task's newest tick records from the Redis at addr under
// prefix, as tickd history reads them.
func Ticks(t testing.TB, addr, prefix, task string, limit int) []driver.TickRecord {
	t.Helper()
	s := store(t, addr, prefix)
	defer s.Stop(context.Background())
	return TicksIn(t, s, task, limit)
}

// TicksIn reads task's newest tick records from s, as tickd history reads
// them.
func TicksIn(t testing.TB, s *lease.Store, task string, limit int) []driver.TickRecord {
	t.Helper()
	rs, err := s.Fleet().Ticks(context.Background(), task, limit)
	if err != nil {
		expect.Fatalf(t, "read tick records: %v", err)
	}
	return rs
}

// DueCount is how many due entries the Redis at addr holds under prefix.
func DueCount(t testing.TB, addr, prefix string) int {
	t.Helper()
	s := store(t, addr, prefix)
	defer s.Stop(context.Background())
	n, err := s.Fleet().DueCount(context.Background())
	if err != nil {
		expect.Fatalf(t, "count due entries: %v", err)
	}
	return n
}

// store is a lease store on the Redis at addr under prefix; closing it
// closes its client.
func store(t testing.TB, addr, prefix string) *lease.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	s, err := stores.Redis(c, prefix, lease.Options{})
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	t.Cleanup(func() { c.Close() })
	return s
}

// InitEpoch declares the Redis at addr new to tickd under prefix, as
// lease.Store.InitEpoch does: no data-loss quarantine on the first start, and
// catch-up ticks from before it may run. Tests only.
func InitEpoch(t testing.TB, addr, prefix string) {
	t.Helper()
	initEpoch(t, redis.NewClient(&redis.Options{Addr: addr}), prefix)
}

// InitEpochCluster is InitEpoch for the Redis Cluster with seed nodes addrs.
func InitEpochCluster(t testing.TB, addrs []string, prefix string) {
	t.Helper()
	initEpoch(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}), prefix)
}

func initEpoch(t testing.TB, c redis.UniversalClient, prefix string) {
	t.Helper()
	defer c.Close()
	s, err := stores.Redis(c, prefix, lease.Options{})
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	defer s.Stop(context.Background())
	if err := s.InitEpoch(context.Background()); err != nil {
		expect.Fatalf(t, "init epoch: %v", err)
	}
}
