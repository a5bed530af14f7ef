package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestMetricsPortCannotBeStarved: a client that opens 100 keep-alive
// connections to metrics_addr (one GET /healthz each, then idle), as the
// review did, holds at most 8 of tickd's sockets, and a client from
// another address still gets /metrics. Before, all 100 stayed open for
// ever: under a 128-file limit runs failed with "too many open files".
func TestMetricsPortCannotBeStarved(t *testing.T) {
	e := newOpsEnv(t, true, "\n[[tasks]]\nname = \"x\"\nevery = \"1h\"\ncommand = [\"true\"]\n")
	d := e.daemon("A", "0s")
	before := openFiles(t, d.Pid())
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
	held := openFiles(t, d.Pid()) - before
	t.Logf("100 connections from one address: %d answered; tickd holds %d more descriptors", answered, held)
	// 8, and a few of Redis's pool that may have grown meanwhile.
	expect.True(t, fmt.Sprintf("one client holds at most 8 of tickd's descriptors: %d more sockets", held), held <= 8+4)
	other := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	resp, err := other.Get("http://" + e.metrics + "/metrics")
	if err != nil {
		t.Fatalf("another client's scrape: %v", err)
	}
	resp.Body.Close()
	expect.Equal(t, "another client's scrape", resp.StatusCode, http.StatusOK)
}

// openFiles counts the descriptors process pid has open.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}
