package heartbeat

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/pingtest"
	"github.com/tickd/tickd/lease/memdriver"
)

// senders makes n Senders sharing one store's claims, as n replicas.
func senders(t *testing.T, n int) []*Sender {
	store := lease.New(memdriver.New(), lease.Options{Replica: "a"})
	t.Cleanup(func() { store.Stop(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ss := make([]*Sender, n)
	for i := range ss {
		ss[i] = New(ctx, Options{Claim: store.Fleet().Claim, Log: slog.New(slog.DiscardHandler), Backoff: retry.Backoff{First: time.Millisecond, Max: 4 * time.Millisecond}})
	}
	return ss
}

var tick = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

// TestEachPingOnceForTheFleet: three replicas send the start and the end of
// one tick; the monitor gets each once, the start first, with the tick's
// rid, and the end's summary as its body.
func TestEachPingOnceForTheFleet(t *testing.T) {
	m := pingtest.Start(t)
	ss := senders(t, 3)
	url := m.URL + "/ping/abc"
	for _, s := range ss {
		s.Send(Ping{Task: "sync", URL: url, Tick: tick, Kind: Start, Keep: time.Hour})
	}
	for _, s := range ss {
		s.Wait()
	}
	for _, s := range ss {
		s.Send(Ping{Task: "sync", URL: url, Tick: tick, Kind: Fail, Body: "2 runs failed", Keep: time.Hour})
		s.Send(Ping{Task: "sync", URL: url, Tick: tick, Kind: Success, Keep: time.Hour}) // the end is one claim, whichever it says
	}
	for _, s := range ss {
		s.Wait()
	}
	rid := RID("sync", tick)
	ua := "Go-http-client/1.1" // none set: Go's
	want := []pingtest.Ping{{Method: "GET", Check: "/ping/abc", Kind: "start", RID: rid, Agent: ua}, {Method: "POST", Check: "/ping/abc", Kind: "fail", RID: rid, Body: "2 runs failed", Agent: ua}}
	expect.Equal(t, "pings", fmt.Sprint(m.Pings()), fmt.Sprint(want))
}

// TestNoStartAfterTheEnd: a replica whose fan-out of a tick comes after
// another judged the tick over and sent its end (a late fan-out, after an
// outage of the store) sends no start: the monitor would take the tick as
// begun again.
func TestNoStartAfterTheEnd(t *testing.T) {
	m := pingtest.Start(t)
	ss := senders(t, 2)
	url := m.URL + "/ping/abc"
	ss[0].Send(Ping{Task: "sync", URL: url, Tick: tick, Kind: Success, Keep: time.Hour})
	ss[0].Wait()
	ss[1].Send(Ping{Task: "sync", URL: url, Tick: tick, Kind: Start, Keep: time.Hour})
	ss[1].Wait()
	want := []pingtest.Ping{{Method: "POST", Check: "/ping/abc", Kind: "success", RID: RID("sync", tick), Agent: "Go-http-client/1.1"}}
	expect.Equal(t, "pings", fmt.Sprint(m.Pings()), fmt.Sprint(want))
}

// TestRetriedUntilTheMonitorTakesIt: a monitor that answers 503, then 429,
// gets the ping again until it takes it.
func TestRetriedUntilTheMonitorTakesIt(t *testing.T) {
	m := pingtest.Start(t, http.StatusServiceUnavailable, http.StatusTooManyRequests)
	s := senders(t, 1)[0]
	s.Send(Ping{Task: "sync", URL: m.URL, Tick: tick, Kind: Success, Body: "ok", Keep: time.Hour})
	s.Wait()
	expect.Equal(t, "tries", len(m.Pings()), 3)
}

// TestAWrongURLIsNotRetried: a 404 says the check is not there; trying
// again will not change it.
func TestAWrongURLIsNotRetried(t *testing.T) {
	m := pingtest.Start(t, http.StatusNotFound, http.StatusNotFound)
	s := senders(t, 1)[0]
	s.Send(Ping{Task: "sync", URL: m.URL, Tick: tick, Kind: Start, Keep: time.Hour})
	s.Wait()
	expect.Equal(t, "tries", len(m.Pings()), 1)
}

// TestGivenUpInTime: a monitor that never answers well is given up after
// GiveUp, and the task's next ping is sent.
func TestGivenUpInTime(t *testing.T) {
	m := pingtest.Start(t, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500)
	s := senders(t, 1)[0]
	s.opts.GiveUp = 50 * time.Millisecond
	s.opts.Backoff = retry.Backoff{First: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	s.Send(Ping{Task: "sync", URL: m.URL, Tick: tick, Kind: Start, Keep: time.Hour})
	s.Send(Ping{Task: "sync", URL: m.URL, Tick: tick.Add(time.Minute), Kind: Start, Keep: time.Hour})
	s.Wait()
	got := m.Pings()
	expect.True(t, "a few tries of each, not 20", len(got) >= 2 && len(got) <= 10)
	expect.Equal(t, "the second ping was tried", got[len(got)-1].RID, RID("sync", tick.Add(time.Minute)))
}

// TestRIDIsAUUIDOfTheTick: the same on every replica, another for another
// tick or task, and a UUID the ping API takes.
func TestRIDIsAUUIDOfTheTick(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	r := RID("sync", tick)
	expect.True(t, "a version 8 UUID: "+r, uuid.MatchString(r))
	expect.Equal(t, "the same again", RID("sync", tick.In(time.FixedZone("x", 3600))), r)
	expect.True(t, "another tick's differs", RID("sync", tick.Add(time.Second)) != r)
	expect.True(t, "another task's differs", RID("sync2", tick) != r)
}

// TestTargetKeepsTheChecksQuery: a check URL with a query of its own
// (Healthchecks' ?create=1, a check that creates itself) keeps it; the
// kind's suffix goes on the path, the run id into the query.
func TestTargetKeepsTheChecksQuery(t *testing.T) {
	rid := RID("sync", tick)
	for url, want := range map[string]string{
		"https://hc-ping.com/k/sync":          "https://hc-ping.com/k/sync/start?rid=" + rid,
		"https://hc-ping.com/k/sync?create=1": "https://hc-ping.com/k/sync/start?create=1&rid=" + rid,
	} {
		expect.Equal(t, url, Ping{URL: url, Task: "sync", Tick: tick, Kind: Start}.Target(), want)
	}
}

// TestAHostileMonitorsAnswerIsBounded: a monitor answering with a header
// of a megabyte is cut at 16 KiB (Go's default read 10 MB, a goroutine a
// task); one whose status line is a kilobyte of escapes is said cut and
// printable.
func TestAHostileMonitorsAnswerIsBounded(t *testing.T) {
	answer := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				http.ReadRequest(bufio.NewReader(c)) //nolint:errcheck // answered whatever it is
				c.Write([]byte(<-answer))            //nolint:errcheck
			}()
		}
	}()
	s := senders(t, 1)[0]
	p := Ping{Task: "sync", URL: "http://" + ln.Addr().String() + "/ping/x", Tick: tick, Kind: Start}
	answer <- "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", 1<<20) + "\r\nContent-Length: 0\r\n\r\n"
	_, err = s.post(context.Background(), p)
	expect.True(t, fmt.Sprintf("a megabyte of header is refused: %v", err), err != nil && strings.Contains(err.Error(), "header"))
	answer <- "HTTP/1.1 418 \x1b[2J" + strings.Repeat("\x07x", 500) + "\r\nContent-Length: 0\r\n\r\n"
	_, err = s.post(context.Background(), p)
	expect.True(t, fmt.Sprintf("the status line cut and printable: %q", err), err != nil && len(err.Error()) < 400 && !strings.ContainsAny(err.Error(), "\x1b\x07"))
}
