// Package pgtest starts throwaway PostgreSQL servers for tests, as
// redistest starts Redis: a real postgres on a free loopback port, its own
// data directory, no durability (fsync off), stopped in t.Cleanup. The
// binaries are the distribution's (on PATH, or Debian's
// /usr/lib/postgresql/N/bin); when there are none the test fails with the
// one line that says how to get them. A cluster is initialised once per
// test process and copied for each server (initdb takes seconds, a copy a
// fraction of one). As root, the server runs as the "postgres" user (or
// "nobody"): postgres refuses to run as root.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
)

// HowToInstall is the one line a test prints when it finds no PostgreSQL.
const HowToInstall = "postgres and initdb not found (on PATH or in /usr/lib/postgresql/*/bin): install them (Debian/Ubuntu: sudo apt-get install -y postgresql; macOS: brew install postgresql)"

// Server is one running postgres.
type Server struct {
	Addr string // host:port on loopback
	Dir  string // its data directory

	cmd    *exec.Cmd
	exited chan struct{}
}

// DSN is a URL to the server's database "postgres" as its superuser, with
// no password (trust on loopback).
func (s *Server) DSN() string {
	return "postgres://postgres@" + s.Addr + "/postgres?sslmode=disable"
}

// bin is the directory of the server's programs.
func bin(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("initdb"); err == nil { // a link, perhaps, to the directory of them all
		if p, err = filepath.EvalSymlinks(p); err == nil {
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), "pg_isready")); err == nil {
				return filepath.Dir(p)
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d
		}
	}
	expect.Fatalf(t, "%s", HowToInstall)
	return ""
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// Psql is the path of psql.
func Psql(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	return filepath.Join(bin(t), "psql")
}

// as is who the server runs as: nil (this user), or, as root, the
// postgres user's (or nobody's) ids.
func as() *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		if u, err := user.Lookup(name); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		}
	}
	return nil
}

var template struct {
	once sync.Once
	dir  string
	err  error
}

// cluster is the test process's initialised data directory, to copy.
func cluster(t testing.TB) string {
	t.Helper()
	b := bin(t)
	template.once.Do(func() {
		template.dir, template.err = initdb(b)
	})
	if template.err != nil {
		expect.Fatalf(t, "initdb: %v", template.err)
	}
	return template.dir
}

func initdb(bin string) (string, error) {
	dir, err := ownedDir("tickdpgt")
	if err != nil {
		return "", err
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as()}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	return data, nil
}

// ownedDir is a new directory the server's user owns and may reach.
func ownedDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	if c := as(); c != nil {
		if err := os.Chown(dir, int(c.Uid), int(c.Gid)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// Start runs a postgres for the test and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	tmpl := cluster(t)
	dir, err := ownedDir("tickdpg")
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{Dir: filepath.Join(dir, "data")}
	cp := exec.Command("cp", "-a", tmpl, s.Dir)
	if out, err := cp.CombinedOutput(); err != nil {
		expect.Fatalf(t, "copy the initialised cluster: %v\n%s", err, out)
	}
	for attempt := 1; ; attempt++ {
		port := redistest.FreePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		log, err := s.start(t, port)
		if err == nil {
			break
		}
		if attempt < 5 && strings.Contains(log, "already in use") {
			continue
		}
		expect.Fatalf(t, "postgres on %s not ready: %v\n%s", s.Addr, err, log)
	}
	t.Cleanup(s.Stop)
	return s
}

// start starts the server on port and waits until it accepts connections.
func (s *Server) start(t testing.TB, port int) (log string, err error) {
	b := bin(t)
	logPath := filepath.Join(filepath.Dir(s.Dir), "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	s.cmd = exec.Command(filepath.Join(b, "postgres"), "-D", s.Dir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=warning")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as(), Pdeathsig: syscall.SIGKILL} // a test killed leaves no server
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return "", err
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }() //nolint:errcheck
	ready := expect.Within(20*time.Second, func() bool {
		select {
		case <-s.exited:
			return true
		default:
		}
		return exec.Command(filepath.Join(b, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port)).Run() == nil
	})
	select {
	case <-s.exited:
		out, _ := os.ReadFile(logPath)
		return string(out), fmt.Errorf("postgres exited")
	default:
	}
	if !ready {
		s.Stop()
		out, _ := os.ReadFile(logPath)
		return string(out), fmt.Errorf("not ready in 20s")
	}
	return "", nil
}

// Stop shuts the server down (fast: its sessions are ended) and waits.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGINT) //nolint:errcheck
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill() //nolint:errcheck
		<-s.exited
	}
}

// Exec runs sql (statements, ";"-separated) with psql on the server and
// returns what it printed: unaligned, tuples only, one row a line, fields
// split by "|". An error stops it and fails the test.
func (s *Server) Exec(t testing.TB, sql string) string {
	t.Helper()
	cmd := exec.Command(Psql(t), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", s.DSN(), "-c", sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		expect.Fatalf(t, "psql: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}
