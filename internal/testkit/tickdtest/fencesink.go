package tickdtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

var (
	sinkOnce sync.Once
	sinkErr  error
)

// Sink is a running fence sink: its HTTP URL (the middleware's log), the
// address of its line protocol and its client's binary, which a worker
// runs to ask it for a write.
type Sink struct{ URL, Line, Bin string }

// Env is what a worker's environment needs to write through the sink's
// guards: for the entities listed, or every one.
func (s Sink) Env(entities ...string) []string {
	return []string{"TESTWORKER_SINK=" + s.Line, "TESTWORKER_SINK_BIN=" + s.Bin, "TESTWORKER_SINK_ONLY=" + strings.Join(entities, ",")}
}

// FenceSink starts cmd/tickd/internal/fencesink, the sink that writes
// through the fence guards to the Postgres at pgDSN and the Redis at
// redisAddr: a run's worker writes to it when its environment has
// TESTWORKER_SINK=sink.Line. It is stopped when the test ends.
func FenceSink(t testing.TB, pgDSN, redisAddr string) Sink {
	t.Helper()
	Binaries(t) // the build dir
	bin := filepath.Join(buildDir, "fencesink")
	client := filepath.Join(buildDir, "sinkclient")
	sinkOnce.Do(func() {
		if sinkErr = goBuild(bin, "./cmd/tickd/internal/fencesink"); sinkErr == nil {
			sinkErr = goBuild(client, "./internal/testkit/sinkclient")
		}
	})
	if sinkErr != nil {
		expect.Fatalf(t, "%v", sinkErr)
	}
	addrFile := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(bin, "-pg", pgDSN, "-redis", redisAddr, "-addr-file", addrFile)
	out, err := os.CreateTemp("", "fencesink")
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		expect.Fatalf(t, "%v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() //nolint:errcheck
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck
		<-exited
		out.Close()
		os.Remove(out.Name())
	})
	var addrs []byte
	ok := expect.Within(20*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		addrs, err = os.ReadFile(addrFile)
		return err == nil
	})
	var httpAddr, line string
	if _, err := fmt.Sscanf(string(addrs), "http %s\nline %s\n", &httpAddr, &line); !ok || err != nil {
		log, _ := os.ReadFile(out.Name())
		expect.Fatalf(t, "the fence sink did not start:\n%s", log)
	}
	return Sink{URL: "http://" + httpAddr, Line: line, Bin: client}
}

// HTTPLog is what the sink's HTTP guard let through: the fences by key,
// in order.
func (s Sink) HTTPLog(t testing.TB) map[string][]int64 {
	t.Helper()
	resp, err := http.Get(s.URL + "/http-log")
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	defer resp.Body.Close()
	var log map[string][]int64
	if err := json.NewDecoder(resp.Body).Decode(&log); err != nil {
		expect.Fatalf(t, "%v", err)
	}
	return log
}
