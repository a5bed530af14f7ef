package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// TestMetricsPortCannotBeStarved: a client that opens 100 keep-alive
// connections to metrics_addr (one GET /healthz each, then idle), as the
// review did, holds at most 8 of tickd's sockets, and a client from
// another address still gets /metrics. Before, all 100 stayed open for
// ever: under a 128-file limit runs failed with "too many open files".
func TestMetricsPortCannotBeStarved(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, true, "\n[[tasks]]\nname = \"x\"\nevery = \"1h\"\ncommand = [\"true\"]\n")
	d := e.daemon("A", "0s")
	port := e.metrics[strings.LastIndexByte(e.metrics, ':')+1:]
	before := socketsOnPort(t, d.Pid(), port)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 100 {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Timeout: 2 * time.Second}).Dial("tcp", e.metrics)
		if err != nil {
			continue // the backlog is full: the point
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	answered := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)) //nolint:errcheck
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			resp.Body.Close()
			answered++
		}
	}
	held := socketsOnPort(t, d.Pid(), port) - before
	t.Logf("100 connections from one address: %d answered; tickd holds %d more sockets on the metrics port", answered, held)
	expect.True(t, fmt.Sprintf("one client holds at most 8 of tickd's sockets: %d more on the metrics port", held), held <= 8)
	other := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	resp, err := other.Get("http://" + e.metrics + "/metrics")
	if err != nil {
		t.Fatalf("another client's scrape: %v", err)
	}
	resp.Body.Close()
	expect.Equal(t, "another client's scrape", resp.StatusCode, http.StatusOK)
}

// socketsOnPort counts the sockets process pid holds whose local port is
// port (decimal): its descriptors' socket inodes matched against the TCP
// tables. Only the metrics port's sockets count, so Redis's pool growing
// under a loaded machine's latency cannot flip the judgement (CI saw 14
// sockets where 8 were the metrics port's).
func socketsOnPort(t *testing.T, pid int, port string) int {
	t.Helper()
	want, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	onPort := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == want {
				onPort["socket:["+f[9]+"]"] = true
			}
		}
	}
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && onPort[l] {
			n++
		}
	}
	return n
}

// TestAFIFOAtTheConfigPathBlocksNothing: the config swapped for a FIFO (no
// writer) and a SIGHUP: the reload fails at once (the metric says so),
// the old config runs on, and SIGTERM stops the daemon. Before, the reload
// opened the FIFO and waited for a writer for ever: SIGTERM was ignored.
func TestAFIFOAtTheConfigPathBlocksNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	metrics := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	tickdtest.WriteFile(t, cfg, fmt.Sprintf("[daemon]\nlog_format = \"json\"\nshutdown_timeout = \"1s\"\nmetrics_addr = %q\n[[tasks]]\nname = \"a\"\nevery = \"1h\"\ncommand = [\"true\"]\n", metrics))
	p := tickdtest.Start(t, "A", nil, "-config", cfg)
	p.WaitReady(20 * time.Second)
	os.Remove(cfg) //nolint:errcheck
	if err := syscall.Mkfifo(cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	expect.WaitFor(t, 10*time.Second, "tickd_config_last_reload_successful 0", func() bool {
		_, m := get(t, "http://"+metrics+"/metrics")
		return strings.Contains(m, "\ntickd_config_last_reload_successful 0\n")
	})
	p.Signal(syscall.SIGTERM)
	expect.Equal(t, "the stop's exit status", p.Wait(20*time.Second), 0)
	expect.True(t, "the log says why:\n"+p.Log(), strings.Contains(p.Log(), "not a regular file"))
}
