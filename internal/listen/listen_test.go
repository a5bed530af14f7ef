package listen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestIdleConnectionsMakeRoom: four addresses each holding eight idle
// keep-alive connections fill a cap of 32; a probe from a fifth address
// is answered at once, an idle connection closed to make room. Before,
// it waited in the backlog for as long as the idle ones were kept (the
// kubelet's probes timed out, and the pod was restarted). A ninth
// connection from a full address takes the place of that address's own
// idlest one.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	l := Limits{ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Hour, MaxConns: 32, PerClient: 8}
	ln, err := TCP(context.Background(), "127.0.0.1:0", l)
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }), l, slog.New(slog.DiscardHandler))
	srv.ConnState = ln.ConnState
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed at the end
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	get := func(from string) (net.Conn, error) {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}).Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(3 * time.Second)) //nolint:errcheck
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		resp.Body.Close()
		c.SetDeadline(time.Time{}) //nolint:errcheck
		return c, nil              // kept open: an idle keep-alive
	}
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for a := 1; a <= 4; a++ {
		for range 8 {
			c, err := get(fmt.Sprintf("127.0.0.%d", a))
			if err != nil {
				t.Fatalf("filling the cap: %v", err)
			}
			held = append(held, c)
		}
	}
	began := time.Now()
	c, err := get("127.0.0.5")
	expect.True(t, fmt.Sprintf("a probe from a new address is answered under a full cap: %v", err), err == nil)
	expect.True(t, "at once", time.Since(began) < 2*time.Second)
	if c != nil {
		c.Close()
	}
	c, err = get("127.0.0.1")
	expect.True(t, fmt.Sprintf("a ninth connection of a full address is answered: %v", err), err == nil)
	if c != nil {
		c.Close()
	}
}
