package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/fence"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/proc"
	"github.com/tickd/tickd/internal/testkit/expect"
)

type buf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *buf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }
func (b *buf) Len() int                    { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Len() }

func logger() (*slog.Logger, *buf) {
	b := &buf{}
	return slog.New(slog.NewJSONHandler(b, nil)), b
}

func collect(t *testing.T, s Source) ([]string, error) {
	t.Helper()
	var ids []string
	err := s.Each(context.Background(), func(id string) error { ids = append(ids, id); return nil })
	return ids, err
}

func TestFileSourceSkipsBlankAndBadLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ids")
	long := strings.Repeat("x", maxIDLen+1)
	os.WriteFile(p, []byte("a\r\n\n  \nb c\nnul\x00id\n\xff\xfe\n"+long+"\nlast"), 0o644) //nolint:errcheck
	log, out := logger()
	ids, err := collect(t, File{Path: p, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[a b c last]" || len(ids) != 3 {
		t.Fatalf("ids %q", ids)
	}
	if n := strings.Count(out.String(), "skipping entity id"); n != 3 {
		t.Fatalf("%d bad lines reported:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), `"bad_lines":3`) {
		t.Fatal("no count of bad lines")
	}
	if _, err := collect(t, File{Path: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Fatal("missing file accepted")
	}
}

// TestFileSourceRefusesAFIFO: a FIFO as entities_file is refused at once;
// opening it to read would wait for a writer for ever, with the fan-out
// and its OS thread.
func TestFileSourceRefusesAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ids")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := collect(t, File{Path: p}); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a FIFO read as a source: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the source still blocks on the FIFO after 5s")
	}
}

func TestCommandSourceStreamsAMillionLines(t *testing.T) {
	n := 0
	err := Command{Argv: []string{"seq", "1000000"}, Timeout: time.Minute}.Each(context.Background(), func(string) error { n++; return nil })
	if err != nil || n != 1000000 {
		t.Fatalf("%d ids, %v", n, err)
	}
}

func TestCommandSourceFailures(t *testing.T) {
	_, err := collect(t, Command{Argv: []string{"sh", "-c", "echo a; echo boom >&2; exit 3"}, Timeout: time.Minute})
	if err == nil {
		t.Fatal("a failing command's ids accepted")
	}
	expect.True(t, "the error gives the exit status: "+err.Error(), strings.Contains(err.Error(), "exit status 3"))
	expect.True(t, "the error quotes stderr: "+err.Error(), strings.Contains(err.Error(), "boom"))
	start := time.Now()
	_, err = collect(t, Command{Argv: []string{"sh", "-c", "echo a; sleep 60"}, Timeout: 300 * time.Millisecond})
	if err == nil {
		t.Fatal("a hanging command's ids accepted")
	}
	expect.True(t, "the error says it timed out: "+err.Error(), strings.Contains(err.Error(), "timed out"))
	expect.True(t, "the command was stopped, not waited for", time.Since(start) < 10*time.Second)
	log, out := logger()
	ids, err := collect(t, Command{Argv: []string{"sh", "-c", "head -c 20000 /dev/urandom; echo; echo ok"}, Timeout: time.Minute, Log: log})
	if err != nil || ids[len(ids)-1] != "ok" {
		t.Fatalf("binary garbage: %v %q", err, ids[len(ids)-1:])
	}
	_ = out
	if _, err := collect(t, Command{Argv: []string{"/no/such/cmd"}}); err == nil {
		t.Fatal("missing command accepted")
	}
}

func TestExecStopsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	// The command ignores SIGTERM and has a child that does too: both must
	// be gone after the grace, killed with the group.
	script := fmt.Sprintf(`trap '' TERM; sh -c 'trap "" TERM; echo $$ > %s; sleep 60' & sleep 60`, pidFile)
	ctx, cancel := context.WithCancelCause(context.Background())
	log, logged := logger()
	defer func() {
		if !strings.Contains(logged.String(), logs.MsgKilled) {
			t.Errorf("the SIGKILL after the grace was not logged:\n%s", logged)
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := Exec{Argv: []string{"sh", "-c", script}, Grace: 200 * time.Millisecond}.Do(ctx, Run{Logger: log})
		done <- err
	}()
	var childPid int
	expect.WaitFor(t, 10*time.Second, "the child to start", func() bool {
		b, _ := os.ReadFile(pidFile)
		fmt.Sscan(string(b), &childPid) //nolint:errcheck
		return childPid != 0
	})
	stopped := time.Now()
	cause := errors.New("lease lost (test)")
	cancel(cause)
	select {
	case err := <-done:
		if !errors.Is(err, cause) {
			t.Fatalf("error %v does not carry the cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run not stopped")
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Fatalf("stop took %v", d)
	}
	expect.WaitFor(t, 5*time.Second, fmt.Sprintf("grandchild %d to be gone with the run", childPid), func() bool {
		return syscall.Kill(childPid, 0) != nil
	})
}

func TestExecResults(t *testing.T) {
	log, out := logger()
	run := Run{Task: "t", Entity: "e 1", Tick: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Fence: 42, Reason: "tick", Logger: log}
	res, err := Exec{Argv: []string{"sh", "-c", `echo "$TICKD_TASK/$TICKD_ENTITY/$TICKD_TICK/$TICKD_FENCE/$TICKD_REASON/$1"; exit 75`, "sh", "{entity}"}, RescheduleCode: 75}.Do(context.Background(), run)
	if err != nil || res != Reschedule {
		t.Fatalf("%v %v", res, err)
	}
	if !strings.Contains(out.String(), `"msg":"t/e 1/2026-01-02T03:04:05Z/42/tick/e 1"`) {
		t.Fatalf("log %s", out.String())
	}
	if _, err := (Exec{Argv: []string{"false"}}).Do(context.Background(), run); !errors.Is(err, ErrExit) {
		t.Fatalf("false: %v", err)
	}
	if res, err := (Exec{Argv: []string{"true"}}).Do(context.Background(), run); err != nil || res != Done {
		t.Fatalf("true: %v %v", res, err)
	}
}

func TestHTTPAction(t *testing.T) {
	var got Body
	var auth, ctype string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth, ctype = r.Header.Get("Authorization"), r.Header.Get("Content-Type")
		json.NewDecoder(r.Body).Decode(&got) //nolint:errcheck
		switch got.Entity {
		case "more":
			w.Header().Set(RescheduleHeader, "reschedule")
		case "bad":
			w.WriteHeader(500)
			w.Write([]byte(strings.Repeat("upstream down <b>é", 40))) //nolint:errcheck
		}
	}))
	defer srv.Close()
	run := Run{Task: "t", Entity: "e", Tick: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Fence: 7, Reason: "trigger"}
	h := HTTP{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer t0k"}}
	if res, err := h.Do(context.Background(), run); err != nil || res != Done {
		t.Fatalf("%v %v", res, err)
	}
	if auth != "Bearer t0k" || ctype != "application/json" {
		t.Fatalf("headers sent: Authorization %q, Content-Type %q", auth, ctype)
	}
	if got != (Body{Task: "t", Entity: "e", Tick: "2026-01-02T03:04:05Z", Fence: 7, Reason: "trigger"}) {
		t.Fatalf("body %+v", got)
	}
	run.Entity = "more"
	if res, err := h.Do(context.Background(), run); err != nil || res != Reschedule {
		t.Fatalf("%v %v", res, err)
	}
	run.Entity = "bad"
	if _, err := h.Do(context.Background(), run); !errors.Is(err, ErrStatus) || OutputOf(err) != "" {
		t.Fatalf("500: %v (output %q)", err, OutputOf(err))
	}
	// With KeepBody, the start of the body comes with the error.
	h.KeepBody = 18 // the last byte is half of é: left out
	_, err := h.Do(context.Background(), run)
	if !errors.Is(err, ErrStatus) || OutputOf(err) != "upstream down <b>" {
		t.Fatalf("500 with KeepBody: %v (output %q)", err, OutputOf(err))
	}
}

// TestHTTPActionIsFenced: an HTTP action's request says its run's fence,
// task and entity in headers, which fence.Middleware reads: a stale run's
// call fails with 409, and reaches nothing.
func TestHTTPActionIsFenced(t *testing.T) {
	var reached []string
	srv := httptest.NewServer(fence.Middleware(&fence.Memory{}, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		tok, _ := fence.FromContext(r.Context())
		reached = append(reached, fmt.Sprint(tok.Task, " ", tok.Entity, " ", tok.Fence))
	})))
	defer srv.Close()
	h := HTTP{URL: srv.URL}
	run := Run{Task: "sync", Entity: "shop 7/ü\n", Fence: 7}
	if _, err := h.Do(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	run.Fence = 5
	if _, err := h.Do(context.Background(), run); !errors.Is(err, ErrStatus) || !strings.Contains(err.Error(), "409") {
		t.Fatalf("a stale run's call: %v, want a 409", err)
	}
	if strings.Join(reached, ",") != "sync shop 7/ü\n 7" {
		t.Fatalf("reached: %q", reached)
	}
}

// TestExecKeepsTheEndOfItsOutput: a failed command's error carries the
// last KeepOutput bytes of its output lines, stdout and stderr.
func TestExecKeepsTheEndOfItsOutput(t *testing.T) {
	e := Exec{Argv: []string{"sh", "-c", `i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; echo "it broke"; exit 3`}, KeepOutput: 30}
	_, err := e.Do(context.Background(), Run{Entity: "e"})
	if !errors.Is(err, ErrExit) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("error %v", err)
	}
	out := OutputOf(err)
	if len(out) > 30 || !strings.HasSuffix(out, "it broke\n") || !strings.Contains(out, "line 99\n") {
		t.Fatalf("output kept: %q", out)
	}
	e.Argv = []string{"sh", "-c", `echo "to stderr" >&2; exit 1`}
	if _, err := e.Do(context.Background(), Run{}); OutputOf(err) != "to stderr\n" {
		t.Fatalf("stderr kept: %q (%v)", OutputOf(err), err)
	}
	var tl proc.Tail
	tl.Max = 3
	tl.Write([]byte("ab")) //nolint:errcheck
	tl.Write([]byte("cé")) //nolint:errcheck
	if got := tl.String(); got != "cé" {
		t.Fatalf("tail %q, want the last 3 bytes from a rune's start", got)
	}
}

// TestExecKeepsTheOrderOfStdoutAndStderr: lines written to stdout and
// stderr in turn are kept (and logged) in the order written, 20 times over
// (with two pipes, the stderr line came first in about half the runs).
func TestExecKeepsTheOrderOfStdoutAndStderr(t *testing.T) {
	e := Exec{Argv: []string{"sh", "-c", `echo "processing 1"; echo "ERROR 1" >&2; echo "processing 2"; echo "ERROR 2" >&2; exit 1`}, KeepOutput: 4096}
	want := "processing 1\nERROR 1\nprocessing 2\nERROR 2\n"
	for i := range 20 {
		var logged buf
		_, err := e.Do(context.Background(), Run{Entity: "e", Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if got := OutputOf(err); got != want {
			t.Fatalf("run %d kept %q, want %q", i, got, want)
		}
		if l := logged.String(); !(strings.Index(l, "processing 1") < strings.Index(l, "ERROR 1") &&
			strings.Index(l, "ERROR 1") < strings.Index(l, "processing 2") && strings.Index(l, "processing 2") < strings.Index(l, "ERROR 2")) {
			t.Fatalf("run %d logged out of order:\n%s", i, l)
		}
	}
}

func TestHandlerPanicIsAFailure(t *testing.T) {
	h := Handler(func(context.Context, Run) (Result, error) { panic("boom") })
	if _, err := h.Do(context.Background(), Run{}); !errors.Is(err, ErrPanic) {
		t.Fatalf("%v", err)
	}
	var r Registry
	if err := r.Register("x", func(context.Context, Run) (Result, error) { return Done, nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("x", nil); err == nil {
		t.Fatal("registered twice")
	}
}

// A run whose Check fails must not begin, whatever the action: a daemon that
// wakes from a freeze with an untrusted lease must not start the command,
// send the request or call the handler.
func TestActionsDoNotBeginWhenCheckFails(t *testing.T) {
	untrusted := errors.New("lease untrusted (test)")
	run := Run{Task: "t", Entity: "e", Check: func() error { return untrusted }}

	marker := filepath.Join(t.TempDir(), "started")
	log, _ := logger()
	run.Logger = log
	if _, err := (Exec{Argv: []string{"touch", marker}}).Do(context.Background(), run); !errors.Is(err, untrusted) {
		t.Fatalf("exec: %v, want the check's error", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("exec started the command anyway: %v", err)
	}

	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests++ }))
	defer srv.Close()
	if _, err := (HTTP{URL: srv.URL}).Do(context.Background(), run); !errors.Is(err, untrusted) {
		t.Fatalf("http: %v, want the check's error", err)
	}
	srv.Close() // waits for any request in flight
	if requests != 0 {
		t.Fatalf("http sent %d requests anyway", requests)
	}

	called := false
	h := Handler(func(context.Context, Run) (Result, error) { called = true; return Done, nil })
	if _, err := h.Do(context.Background(), run); !errors.Is(err, untrusted) || called {
		t.Fatalf("handler: %v, called %v", err, called)
	}

	// A passing check lets every action begin.
	run.Check = func() error { return nil }
	if _, err := (Exec{Argv: []string{"touch", marker}}).Do(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("exec with a passing check: %v", err)
	}
}

func TestRegisterRefusesNilAndNameless(t *testing.T) {
	var r Registry
	if err := r.Register("x", nil); err == nil {
		t.Error("a nil handler was registered")
	}
	if err := r.Register("", func(context.Context, Run) (Result, error) { return Done, nil }); err == nil {
		t.Error("a handler without a name was registered")
	}
	if got := r.Names(); len(got) != 0 {
		t.Errorf("registered %v", got)
	}
}

// TestExecOutputLoggedUpToACap: a run that prints far more than
// proc.MaxLogged puts at most that much in the log, then one line saying how
// much was left out; the kept tail is still its output's end.
func TestExecOutputLoggedUpToACap(t *testing.T) {
	defer func(m int) { proc.MaxLogged = m }(proc.MaxLogged)
	proc.MaxLogged = 64 << 10
	e := Exec{Argv: []string{"sh", "-c", `i=0; while [ $i -lt 20000 ]; do echo "line $i of a chatty run"; i=$((i+1)); done; echo last; exit 1`}, KeepOutput: 100}
	var logged buf
	_, err := e.Do(context.Background(), Run{Entity: "e", Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if out := OutputOf(err); !strings.HasSuffix(out, "last\n") {
		t.Fatalf("kept tail %q", out)
	}
	l := logged.String()
	if n := strings.Count(l, "of a chatty run"); n == 0 || n >= 20000 {
		t.Fatalf("%d of 20000 lines logged", n)
	}
	if n := strings.Count(l, "of a chatty run"); n*len("line 0 of a chatty run\n") > proc.MaxLogged {
		t.Fatalf("%d lines of output logged, past the cap of %d bytes", n, proc.MaxLogged)
	}
	if !strings.Contains(l, "output not logged past the per-run cap") || !strings.Contains(l, "dropped_lines=") {
		t.Fatalf("no line says what was left out:\n%s", l[len(l)-300:])
	}
}

// TestEmptyLinesDoNotMultiplyTheLog: 1 MiB of empty lines (the review's)
// and short lines: the log a run writes stays within about proc.MaxLogged
// (its log bytes, records and all), not 200 times it.
func TestEmptyLinesDoNotMultiplyTheLog(t *testing.T) {
	defer func(m int) { proc.MaxLogged = m }(proc.MaxLogged)
	proc.MaxLogged = 64 << 10
	for name, script := range map[string]string{"empty lines": `head -c 1048576 /dev/zero | tr '\0' '\n'`,
		"one-byte lines": `head -c 524288 /dev/zero | tr '\0' 'x' | fold -w 1`} {
		var logged buf
		e := Exec{Argv: []string{"sh", "-c", script}}
		if _, err := e.Do(context.Background(), Run{Task: "t", Entity: "an-entity", Logger: slog.New(slog.NewJSONHandler(&logged, nil)).With("task", "t", "entity", "an-entity", "tick", "2026-11-27T00:00:00Z", "fence", 1795737884001848)}); err != nil {
			t.Fatal(err)
		}
		expect.True(t, fmt.Sprintf("%s: %d bytes of log for a cap of %d", name, logged.Len(), proc.MaxLogged), logged.Len() <= proc.MaxLogged+4096)
	}
}

// TestHTTPNeverCarriesSecretsToAnotherOrigin: an API that answers a 307 to
// another host (the review's hostile server) gets the run failed, and the
// other host receives nothing: not the POST body, not X-Api-Key (Go's
// client strips only Authorization). With follow_redirects = "same-origin"
// a redirect on the same host is followed, one to another host still not.
// Before, the other host got both, and its 200 counted the run as done.
func TestHTTPNeverCarriesSecretsToAnotherOrigin(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Get("X-Api-Key"))
		mu.Unlock()
	}))
	defer other.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
		case "/here":
			http.Redirect(w, r, "/done", http.StatusTemporaryRedirect)
		case "/done":
			if r.Header.Get("X-Api-Key") != "s3cret" {
				w.WriteHeader(http.StatusUnauthorized)
			}
		}
	}))
	defer api.Close()
	run := Run{Task: "t", Entity: "e", Fence: 1}
	for _, c := range []struct {
		redirects, path string
		ok              bool
	}{{"", "/away", false}, {RedirectsNone, "/here", false}, {RedirectsSameOrigin, "/here", true}, {RedirectsSameOrigin, "/away", false}} {
		h := HTTP{URL: api.URL + c.path, Headers: map[string]string{"X-Api-Key": "s3cret"}, Redirects: c.redirects}
		_, err := h.Do(context.Background(), run)
		expect.True(t, fmt.Sprintf("%q to %s: %v", c.redirects, c.path, err), (err == nil) == c.ok)
		if !c.ok {
			expect.True(t, "says it did not follow: "+err.Error(), errors.Is(err, ErrRedirect))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	expect.Equal(t, "requests the other host received", len(leaked), 0)
}

// TestAURLsSecretsAreNotShown: an action's URL with a password in its user
// part and a token in its query is shown without them in every error a run
// records (a refused status, a 429's reason, a connection refused), which
// history, status and the console show.
func TestAURLsSecretsAreNotShown(t *testing.T) {
	codes := []int{http.StatusInternalServerError, http.StatusTooManyRequests}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(codes[0])
		codes = codes[1:]
	}))
	defer srv.Close()
	secret := strings.Replace(srv.URL, "http://", "http://ops:pa55word@", 1) + "/hook?token=t0ken&x=1"
	for range 2 {
		_, err := HTTP{URL: secret}.Do(context.Background(), Run{Task: "t", Entity: "e"})
		expect.True(t, fmt.Sprintf("an error without the secrets: %v", err), err != nil && !strings.Contains(err.Error(), "pa55word") && !strings.Contains(err.Error(), "t0ken") && strings.Contains(err.Error(), "/hook?token=…&x=…"))
	}
	srv.Close()
	_, err := HTTP{URL: secret}.Do(context.Background(), Run{Task: "t", Entity: "e"})
	expect.True(t, fmt.Sprintf("a connection refused, without the secrets: %v", err), err != nil && !strings.Contains(err.Error(), "pa55word") && !strings.Contains(err.Error(), "t0ken"))
}
