// Package redistest starts throwaway redis-server processes for tests.
//
// Every test that needs Redis calls Start, which runs a real redis-server on a
// free loopback port with its own temporary directory and no persistence, and
// stops it in t.Cleanup. When no redis-server is on PATH, the test fails with
// the one line that says how to get it: tests install nothing, and never skip
// for a missing Redis.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"

	"github.com/redis/go-redis/v9"
)

// HowToInstall is the one line a test prints when it cannot find redis-server.
const HowToInstall = "redis-server not found on PATH: install it (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis)"

// Server is one running redis-server.
type Server struct {
	Addr string // host:port on loopback
	Dir  string // its working directory

	t         testing.TB
	cmd       *exec.Cmd
	persist   bool
	password  string
	port      int
	exited    chan struct{}
	extra     []string // more redis-server arguments (replicaof)
	sentinel  string   // the config file of a sentinel; "" for a server
	snapshots int      // how many Snapshot took
}

// Options tune Start.
type Options struct {
	// Persist makes the server write an append-only file in Dir, so that a
	// Restart keeps its data. Defaults to false: a restart loses everything.
	Persist bool
	// Password, when set, is required from clients (requirepass).
	Password string
	// ReplicaOf, when set, is the host:port of the primary this server
	// replicates.
	ReplicaOf string
}

// Binary returns the path of redis-server.
func Binary(t testing.TB) string {
	t.Helper()
	return Tool(t, "redis-server", HowToInstall)
}

// Tool returns the path of the program bin, or fails the test with howTo,
// the one line that says how to get it. Tests install nothing and never skip
// for a missing program: .ci/run installs what they need before they run.
func Tool(t testing.TB, bin, howTo string) string {
	t.Helper()
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	expect.Fatalf(t, "%v", howTo)
	return ""
}

// Start runs a redis-server for the test and stops it when the test ends.
func Start(t testing.TB, opts ...Options) *Server {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s := &Server{t: t, Dir: t.TempDir(), persist: o.Persist}
	s.password = o.Password
	if o.ReplicaOf != "" {
		host, port, _ := net.SplitHostPort(o.ReplicaOf)
		s.extra = []string{"--replicaof", host, port}
	}
	s.startOnNewPort(FreePort)
	t.Cleanup(s.Stop)
	return s
}

// startOnNewPort starts s on a port newPort picks, and picks again when
// another process took it between the pick and redis-server's bind: on a
// loaded machine, outgoing connections draw their ports from the same
// range (CI saw "bind: Address already in use" for a Cluster node).
func (s *Server) startOnNewPort(newPort func(testing.TB) int) {
	t := s.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		s.port = newPort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		log, err := s.tryStart()
		if err == nil {
			return
		}
		if attempt < 5 && strings.Contains(log, "Address already in use") {
			continue
		}
		expect.Fatalf(t, "redis-server on %s not ready: %v\n%s", s.Addr, err, log)
	}
}

// URL is a redis:// URL for the server, with the password if one is set.
func (s *Server) URL() string {
	if s.password != "" {
		return "redis://:" + s.password + "@" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

func (s *Server) start() {
	s.t.Helper()
	if log, err := s.tryStart(); err != nil {
		expect.Fatalf(s.t, "redis-server on %s not ready: %v\n%s", s.Addr, err, log)
	}
}

// tryStart starts redis-server on s.port and waits until it answers; when
// it does not, it is stopped and its log returned with the error.
func (s *Server) tryStart() (log string, err error) {
	t := s.t
	t.Helper()
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.Dir, "--save", "", "--daemonize", "no",
		"--protected-mode", "no", "--loglevel", "warning",
		"--repl-diskless-sync-delay", "0", // a replica syncs at once
	}
	if s.persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if s.password != "" {
		args = append(args, "--requirepass", s.password)
	}
	args = append(args, s.extra...)
	if s.sentinel != "" {
		args = []string{s.sentinel, "--sentinel"}
	}
	cmd := exec.Command(Binary(t), args...)
	logf, err := os.Create(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		expect.Fatalf(t, "start redis-server: %v", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(s.exited) }() //nolint:errcheck
	if err := s.waitReady(10 * time.Second); err != nil {
		s.Stop()
		b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
		return string(b), err
	}
	return "", nil
}

// waitReady polls PING until the server answers PONG (or NOAUTH, which also
// means it is up) or the deadline passes.
func (s *Server) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("redis-server exited")
		default:
		}
		last = ping(s.Addr)
		if last == nil {
			// The server that answers may be another test's, which took the
			// port between FreePort and this start (this one then exits,
			// "Address already in use", and is started on another port): it
			// is ready when the one answering is this process.
			if last = s.answersAsItself(); last == nil {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	return last
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
		return nil
	}
	if strings.HasPrefix(line, "-LOADING") {
		return fmt.Errorf("loading")
	}
	return fmt.Errorf("unexpected reply %q", line)
}

// answersAsItself checks that the server at s.Addr is s's process (its
// INFO's process_id).
func (s *Server) answersAsItself() error {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck
	r := bufio.NewReader(c)
	if s.password != "" {
		if _, err := fmt.Fprintf(c, "AUTH %s\r\n", s.password); err != nil {
			return err
		}
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("auth: %q, %v", line, err)
		}
	}
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return err
	}
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return fmt.Errorf("INFO: %q, %v", head, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(s.cmd.Process.Pid) + "\r\n"
	if !strings.Contains(string(body), want) {
		return fmt.Errorf("another process answers on %s", s.Addr)
	}
	return nil
}

// Stop kills the server (SIGKILL: like a crash, nothing is flushed beyond
// what appendfsync already wrote) and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill() //nolint:errcheck
	<-s.exited
	s.cmd = nil
}

// Freeze stops the server's process (SIGSTOP): it keeps its connections
// and answers nothing until Thaw.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw lets a frozen server go on (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Errorf("redis-server %s: %v: %v", s.Addr, sig, err)
	}
}

// Restart stops the server and starts it again on the same port. Without
// Options.Persist it comes back empty, as after a crash without persistence.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Snapshot saves the server's data (SAVE) as a snapshot a later
// RestartFrom loads, and returns its path.
func (s *Server) Snapshot() string {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password})
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		expect.Fatalf(s.t, "SAVE on %s: %v", s.Addr, err)
	}
	s.snapshots++
	snap := filepath.Join(s.Dir, fmt.Sprintf("snapshot-%d.rdb", s.snapshots))
	if err := os.Rename(filepath.Join(s.Dir, "dump.rdb"), snap); err != nil {
		expect.Fatalf(s.t, "%v", err)
	}
	return snap
}

// RestartFrom kills the server (SIGKILL) and starts it again on the same
// port from snapshot, as a Redis without an append-only file comes back
// from its last RDB save after a crash: every write since the snapshot is
// gone, and what the snapshot held is back.
func (s *Server) RestartFrom(snapshot string) {
	s.t.Helper()
	s.Stop()
	dump := filepath.Join(s.Dir, "dump.rdb")
	b, err := os.ReadFile(snapshot)
	if err == nil {
		err = os.WriteFile(dump, b, 0o600)
	}
	if err != nil {
		expect.Fatalf(s.t, "%v", err)
	}
	s.start()
	os.Remove(dump) //nolint:errcheck // loaded: a later Restart comes back empty
}

// Running reports whether the server process is up.
func (s *Server) Running() bool { return s.cmd != nil }

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// MainThreadCPU is the CPU time, in µs, the main thread of the Redis c
// talks to has used (INFO cpu: its user and system time), for benchmarks.
func MainThreadCPU(tb testing.TB, c redis.Cmdable) float64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		expect.Fatalf(tb, "%v", err)
	}
	var sum float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys_main_thread" || k == "used_cpu_user_main_thread" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				expect.Fatalf(tb, "INFO cpu: %q: %v", line, err)
			}
			sum += f
		}
	}
	return sum * 1e6
}
