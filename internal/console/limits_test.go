package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
)

// startLimited serves e's console (startFront) on a free loopback port, with
// short limits (a read timeout of read) and at most maxConns connections;
// it returns the address.
func startLimited(t *testing.T, e *env, maxConns int, read time.Duration) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	e.rewire(func(w *config.Web) { w.Listen, w.MaxConnections = addr, maxConns },
		Limits{ReadTimeout: read, WriteTimeout: time.Second, IdleTimeout: 300 * time.Millisecond, MaxBody: 1 << 20})
	stop, err := startFront(e.front, e.web, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// closedWithin says whether the server closes c within d (a read returns
// EOF or a reset), reading whatever it sends first.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d)) //nolint:errcheck
	_, err := io.Copy(io.Discard, c)
	ne, timeout := err.(net.Error)
	return !(timeout && ne.Timeout())
}

// TestSlowClientsAreCut: a request whose body never comes (Content-Length
// 1000, 2 bytes sent) and an idle keep-alive connection are closed by the
// server, without credentials; before, both were held for ever.
func TestSlowClientsAreCut(t *testing.T) {
	e := newEnv(t, true)
	addr := startLimited(t, e, 64, 300*time.Millisecond)
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /tasks/sync/pause HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\nab", addr)
	if !closedWithin(slow, 5*time.Second) {
		t.Fatal("a request whose body never came held its connection for 5s (read timeout 300ms)")
	}
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /static/console.css HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !closedWithin(idle, 5*time.Second) {
		t.Fatal("an idle keep-alive connection was held for 5s (idle timeout 300ms)")
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestConnectionsAreCapped: 40 clients that connect and send nothing hold
// at most max_connections (4) of the server's descriptors: the others wait
// in the kernel's backlog, so the console can never take the descriptors
// runs need. (The clients' own 40 are in this process too.)
func TestConnectionsAreCapped(t *testing.T) {
	e := newEnv(t, true)
	addr := startLimited(t, e, 4, 10*time.Second) // hold them while counting
	before := openFDs(t)
	var cs []net.Conn
	for range 40 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	// The clients past the cap wait in the listening socket's backlog.
	_, port, _ := net.SplitHostPort(addr)
	expect.WaitFor(t, 5*time.Second, "36 connections left in the backlog", func() bool { return backlog(t, port) == 36 })
	if extra := openFDs(t) - before - len(cs); extra > 4+2 {
		t.Fatalf("the server holds %d descriptors for 40 idle clients, want at most max_connections (4)", extra)
	}
}

// backlog is the number of connections waiting to be accepted on the
// loopback listening socket of port (hex in /proc/net/tcp), or -1.
func backlog(t *testing.T, port string) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	local := fmt.Sprintf(":%04X", p)
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 || !strings.HasSuffix(f[1], local) || f[3] != "0A" { // 0A: LISTEN
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, _ := strconv.ParseInt(rx, 16, 64)
		return int(n)
	}
	return -1
}

// TestBodiesAreCapped: a body larger than the cap is refused before auth
// reads anything.
func TestBodiesAreCapped(t *testing.T) {
	e := newEnv(t, true)
	req, _ := http.NewRequest("POST", e.srv.URL+"/tasks/sync/pause", strings.NewReader("reason="+strings.Repeat("x", 2<<20)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2 MiB body: %d, want 413", resp.StatusCode)
	}
}

// TestHostCheckedWithoutUsers: a console without users (loopback only)
// answers only loopback Host names and [web] hosts: a page on evil.test
// that resolves to 127.0.0.1 (DNS rebinding) cannot pause a task.
func TestHostCheckedWithoutUsers(t *testing.T) {
	e := newEnv(t, false)
	do := func(host string) int {
		req, _ := http.NewRequest("POST", e.srv.URL+"/tasks/sync/pause", strings.NewReader("reason=evil"))
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do("evil.test"); code != http.StatusMisdirectedRequest {
		t.Fatalf("Host evil.test: %d, want 421", code)
	}
	if ps, _ := e.store.Fleet().Pauses(t.Context()); len(ps) != 0 {
		t.Fatalf("paused through a rebinding Host: %v", ps)
	}
	for _, h := range []string{"localhost:8080", "127.0.0.1", "[::1]:8080"} {
		if code := do(h); code == http.StatusMisdirectedRequest {
			t.Errorf("Host %s refused", h)
		}
	}
	e.rewire(func(w *config.Web) { w.Hosts = []string{"tickd.internal"} }, Limits{})
	if code := do("tickd.internal:8080"); code == http.StatusMisdirectedRequest {
		t.Error("a name in [web] hosts refused")
	}
	auth := newEnv(t, true) // with users, the credentials protect it: any Host
	req, _ := http.NewRequest("GET", auth.srv.URL+"/", nil)
	req.Host = "tickd.example.com"
	req.SetBasicAuth("view", "pw-view")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with users, Host tickd.example.com: %d", resp.StatusCode)
	}
}

// TestClientMistakesAre400: a cursor no page gave is the client's mistake
// (400, not 502), and /static/ lists nothing.
func TestClientMistakesAre400(t *testing.T) {
	e := newEnv(t, true)
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	st, err := stores.Redis(rc, "tickd", lease.Options{Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop(context.Background()) })
	e.con.store = st
	for _, cursor := range []string{"garbage", "-1.-5", "1.-1"} {
		resp, _ := e.do("GET", "/tasks/sync?cursor="+url.QueryEscape(cursor), "view", nil, nil)
		expect.Equal(t, "cursor "+cursor, resp.StatusCode, http.StatusBadRequest)
	}
	resp, _ := e.do("GET", "/static/", "view", nil, nil)
	expect.Equal(t, "/static/ lists nothing", resp.StatusCode, http.StatusNotFound)
}

// TestPasswordsBcryptWouldBend: a password longer than bcrypt compares
// (72 bytes) is refused, not matched by its first 72; an htpasswd entry
// whose password is empty keeps the console from starting.
func TestPasswordsBcryptWouldBend(t *testing.T) {
	long := strings.Repeat("p", 72)
	h, err := bcrypt.GenerateFromPassword([]byte(long), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, true)
	e.front.auth.users.users["long"] = h
	req, _ := http.NewRequest("GET", e.srv.URL+"/", nil)
	req.SetBasicAuth("long", long+"anything")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	expect.Equal(t, "a 72-byte password with a suffix", resp.StatusCode, http.StatusUnauthorized)
	empty, _ := bcrypt.GenerateFromPassword(nil, bcrypt.MinCost)
	pw := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(pw, []byte("u:"+string(empty)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// tickd check refuses it as the console does (before, check passed a
	// file tickd web then refused).
	cfg, err := config.Parse("t.toml", []byte(fmt.Sprintf("[web]\nlisten = \"127.0.0.1:0\"\nhtpasswd_file = %q\n[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\n", pw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckUsers(cfg); err == nil || !strings.Contains(err.Error(), "empty password: u") {
		t.Fatalf("a config with an empty password: %v", err)
	}
	if _, err := NewFront(e.con, FrontOptions{Web: &config.Web{Listen: "127.0.0.1:0", HtpasswdFile: pw, Refresh: time.Second}}); err == nil || !strings.Contains(err.Error(), "empty password: u") {
		t.Fatalf("a console with an empty password: %v", err)
	}
}

// TestPauseReasonCheckedOnTheServer: the console's pause needs a reason of
// at most MaxReason bytes, whatever the form's HTML says; a refused pause
// changes nothing.
func TestPauseReasonCheckedOnTheServer(t *testing.T) {
	e := newEnv(t, true)
	for what, form := range map[string]url.Values{
		"no reason":      {"for": {"1h"}},
		"a blank reason": {"reason": {"   "}},
		"a long reason":  {"reason": {strings.Repeat("r", ops.MaxReason+1)}},
	} {
		resp, _ := e.do("POST", "/tasks/sync/pause", "ops", form, nil)
		expect.Equal(t, what, resp.StatusCode, http.StatusBadRequest)
	}
	if ps, _ := e.store.Fleet().Pauses(t.Context()); len(ps) != 0 {
		t.Fatalf("paused by a refused form: %v", ps)
	}
}
