// Package heartbeat tells an outside monitor about a task's ticks, in the
// ping API Healthchecks.io defined (Cronitor and others accept it too): URL/start
// when a tick's fan-out starts, then URL when the tick is complete and every
// run succeeded, or URL/fail with a short summary. Each ping carries
// ?rid=, a UUID derived from the task and the tick, which pairs a start
// with its end.
//
// Each ping is sent once per tick for the whole fleet: the replica that
// claims it in the store first (a claim function) sends it; the others do
// not. A ping is sent by a goroutine of its task, never on the run path,
// retried with back-off while the monitor does not answer, and given up
// after Options.GiveUp. A monitor that hears nothing alerts: that is the
// point, for the day tickd, its Redis and its Prometheus are gone together.
package heartbeat

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/retry"
)

// Kind is what a ping says.
type Kind uint8

// The pings of a tick.
const (
	Start   Kind = iota // the tick's fan-out started
	Success             // the tick is complete and every run succeeded
	Fail                // the tick is complete, or can no longer be, and not all is well
)

func (k Kind) String() string { return [...]string{"start", "success", "fail"}[k] }

// suffix is what the ping API appends to the check's URL.
func (k Kind) suffix() string { return [...]string{"/start", "", "/fail"}[k] }

// Ping is one ping of one tick of a task.
type Ping struct {
	Task string
	URL  string // the task's heartbeat_url
	Tick time.Time
	Kind Kind
	Body string // the tick's summary, for Success and Fail
	// Keep is how long the claim holds: past the latest time another
	// replica could still send the same ping.
	Keep time.Duration
}

// Target is the URL the ping is sent to: the check's URL, the kind's
// suffix on its path, and the tick's run id beside the check's own query
// (Healthchecks' ?create=1, say).
func (p Ping) Target() string {
	base, query, _ := strings.Cut(p.URL, "?")
	if query != "" {
		query += "&"
	}
	return base + p.Kind.suffix() + "?" + query + "rid=" + RID(p.Task, p.Tick)
}

// claimName names the ping in the store's claims.
func (p Ping) claimName() string {
	end := "start"
	if p.Kind != Start {
		end = "end"
	}
	return "heartbeat:" + p.Task + ":" + strconv.FormatInt(p.Tick.UnixNano(), 10) + ":" + end
}

// RID is the run id of a tick of task: a UUID (RFC 9562's version 8, made
// from a hash of the task and the tick), the same on every replica.
func RID(task string, tick time.Time) string {
	h := sha256.New()
	h.Write([]byte("tickd heartbeat\x00" + task + "\x00"))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(tick.UnixNano())))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // the RFC's variant
	s := hex.EncodeToString(u[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// Claim claims name for ttl in the store the replicas share, and says
// whether this replica was first (lease.Store.Claim).
type Claim func(ctx context.Context, name string, ttl time.Duration) (bool, error)

// Options configure a Sender.
type Options struct {
	Claim     Claim
	Client    *http.Client // nil: one with a 10s timeout that follows no redirect
	Log       *slog.Logger
	UserAgent string
	// GiveUp bounds how long one ping is tried (its claim and its sends).
	// Defaults to 2m.
	GiveUp time.Duration
	// Backoff is the wait between tries. Defaults to 1s doubling to 30s.
	Backoff retry.Backoff
}

// Sender sends pings, each task's in order, in the background.
type Sender struct {
	opts Options
	ctx  context.Context

	mu     sync.Mutex
	queues map[string][]Ping // by task: what its goroutine has still to send
	wg     sync.WaitGroup
}

// maxQueued bounds the pings of one task waiting to be sent while its
// monitor does not answer; past it, new ones are dropped (and said).
const maxQueued = 32

// New returns a Sender whose goroutines stop when ctx ends: a ping being
// tried then is given up.
func New(ctx context.Context, opts Options) *Sender {
	if opts.Client == nil {
		// A monitor's answer is read with a small header limit: the
		// default 10 MB, a goroutine per task, let 50 tasks' hostile
		// answers hold 654 MB.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxResponseHeaderBytes = maxAnswerHeader
		opts.Client = &http.Client{Timeout: 10 * time.Second, Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if opts.GiveUp == 0 {
		opts.GiveUp = 2 * time.Minute
	}
	if opts.Backoff.First == 0 {
		opts.Backoff = retry.Backoff{First: time.Second, Max: 30 * time.Second}
	}
	return &Sender{opts: opts, ctx: ctx, queues: map[string][]Ping{}}
}

// Send queues p; it never waits.
func (s *Sender) Send(p Ping) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, running := s.queues[p.Task]
	if len(q) >= maxQueued {
		s.opts.Log.Warn("heartbeat dropped: the monitor has not taken this task's earlier pings", logs.KeyTask, p.Task, "ping", p.Kind.String(), logs.Tick(p.Tick))
		return
	}
	s.queues[p.Task] = append(q, p)
	if !running {
		s.wg.Add(1)
		go s.drain(p.Task)
	}
}

// Wait waits for every goroutine to end: what they were sending is sent or
// given up.
func (s *Sender) Wait() { s.wg.Wait() }

// drain sends task's pings in order until none is left.
func (s *Sender) drain(task string) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		q := s.queues[task]
		if len(q) == 0 {
			delete(s.queues, task)
			s.mu.Unlock()
			return
		}
		p := q[0]
		s.queues[task] = q[1:]
		s.mu.Unlock()
		s.one(p)
	}
}

// one claims p and, if it is this replica's, sends it, retrying both
// within GiveUp.
func (s *Sender) one(p Ping) {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.GiveUp)
	defer cancel()
	b := s.opts.Backoff
	claimed := false
	var err error
	for {
		if !claimed {
			var mine bool
			if mine, err = s.opts.Claim(ctx, p.claimName(), p.Keep); err == nil && !mine {
				return // another replica sends it
			}
			claimed = err == nil
			if claimed && p.Kind != Start {
				// No start after this end: a replica whose fan-out of the
				// tick comes late (after an outage of the store) finds
				// the start claimed, and sends none.
				start := p
				start.Kind = Start
				s.opts.Claim(ctx, start.claimName(), p.Keep) //nolint:errcheck // one not made leaves it as before
			}
		}
		if claimed {
			var again bool
			if again, err = s.post(ctx, p); err == nil || !again {
				break
			}
		}
		if !b.Wait(ctx.Done()) {
			break
		}
	}
	host := ""
	if u, perr := url.Parse(p.URL); perr == nil {
		host = u.Host // never the URL: its path is the check's secret
	}
	attrs := []any{logs.KeyTask, p.Task, "ping", p.Kind.String(), logs.Tick(p.Tick), "monitor", host}
	switch {
	case err == nil:
		s.opts.Log.Debug("heartbeat sent", attrs...)
	case s.ctx.Err() != nil:
		// tickd stopping: not the monitor's fault, nor the store's. A
		// replica still running sends the end when it judges the tick.
		s.opts.Log.Info("heartbeat not sent: tickd stopped while sending it", attrs...)
	case !claimed:
		s.opts.Log.Warn("heartbeat not sent: the store did not answer its claim", append(attrs, logs.KeyError, err)...)
	default:
		s.opts.Log.Warn("heartbeat not sent: the monitor did not take it", append(attrs, logs.KeyError, err)...)
	}
}

// maxAnswerHeader bounds the header of a monitor's answer; maxStatus its
// status line as the log shows it.
const (
	maxAnswerHeader = 16 << 10
	maxStatus       = 200
)

// maxBody bounds a ping's body; the ping API keeps about 10 kB of it.
const maxBody = 4 << 10

// post sends p once; again says whether a failure is worth another try.
func (s *Sender) post(ctx context.Context, p Ping) (again bool, err error) {
	body := p.Body
	if len(body) > maxBody {
		body = body[:maxBody]
	}
	method := http.MethodPost
	if p.Kind == Start && body == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, p.Target(), bytes.NewReader([]byte(body)))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	if s.opts.UserAgent != "" {
		req.Header.Set("User-Agent", s.opts.UserAgent)
	}
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message holds the URL
		}
		return true, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) //nolint:errcheck // the answer is its status
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return false, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return true, fmt.Errorf("the monitor answered %s", logs.Printable(resp.Status, maxStatus))
	default:
		return false, fmt.Errorf("the monitor answered %s: is heartbeat_url right?", logs.Printable(resp.Status, maxStatus))
	}
}
