package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log attribute keys: every line about a run carries the first six.
const (
	KeyTask     = "task"
	KeyEntity   = "entity"
	KeyTick     = "tick"
	KeyFence    = "fence"
	KeyReplica  = "replica"
	KeyReason   = "reason"
	KeyOutcome  = "outcome"
	KeyDuration = "duration"
	KeyError    = "error"
)

// MsgSkippedBusy is the debug line of a tick that found an entity's lease
// held and skipped it (its task, entity and tick as attributes): what a
// checker needs to tell a skip from a miss.
const MsgSkippedBusy = "entity busy: skipped"

// MsgAlreadyRan is the debug line of a tick that found the entity's run
// for it, or for a later tick, already started, and skipped it (its task,
// entity and tick as attributes): a checker tells a coalesced tick by it.
const MsgAlreadyRan = "tick already ran for entity"

// MsgRunEnded is the info (or warn) line of a run's end, written once its
// lease is released: a checker knows from it how long the lease was held.
const MsgRunEnded = "run ended"

// LogEvery is how often a failure that repeats (Redis unreachable, a clock
// ahead) is logged: once, then with a count of the lines suppressed.
const LogEvery = 10 * time.Second

// LogLimiter lets one line per key through every interval and counts the
// rest, so that a Redis outage is logged, not once per entity per second.
type LogLimiter struct {
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	hush map[string]int
}

// NewLogLimiter lets one line per key through every interval.
func NewLogLimiter(every time.Duration) *LogLimiter {
	return &LogLimiter{every: every, last: map[string]time.Time{}, hush: map[string]int{}}
}

// allow reports whether a line for key may be logged now, and how many were
// suppressed since the last one.
func (l *LogLimiter) allow(key string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.every {
		l.hush[key]++
		return false, 0
	}
	n := l.hush[key]
	l.last[key], l.hush[key] = now, 0
	return true, n
}

// Log logs msg at lvl if a line for key may be logged now (allow), with
// the count of lines suppressed since the last one when there were any.
func (l *LogLimiter) Log(log *slog.Logger, lvl slog.Level, key, msg string, args ...any) {
	ok, n := l.allow(key)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Log(context.Background(), lvl, msg, args...)
}

func (s *Scheduler) logLimited(key, msg string, args ...any) {
	s.logLimit.Log(s.log, slog.LevelError, key, msg, args...)
}

// storeFailed reports a failure of the lease store's op (redisOps): counted,
// observed, and logged at most once per LogEvery for key. about says which task and tick
// it concerns, where one does.
func (s *Scheduler) storeFailed(op, key, msg string, about Event, err error) {
	s.metrics.RedisError(op)
	about.Kind, about.Err = EventStoreError, err
	s.observe(about)
	var attrs []any
	if about.Task != "" {
		attrs = append(attrs, KeyTask, about.Task)
	}
	if !about.Tick.IsZero() {
		attrs = append(attrs, tickAttr(about.Tick))
	}
	s.logLimited(key, msg, append(attrs, KeyError, err)...)
}

// quarantined says, once per quarantine, that Redis holds no tickd state
// and for how long nothing is granted: on a first start this is expected,
// after a data loss it is what keeps a forgotten lease from being granted
// twice. It is not a Redis error.
func (s *Scheduler) quarantined(left time.Duration) {
	now := s.clock.Now()
	for {
		end := s.quarantineEnd.Load()
		if now.UnixNano() < end {
			return // said already
		}
		if s.quarantineEnd.CompareAndSwap(end, now.Add(left).UnixNano()) {
			break
		}
	}
	s.history.lost()
	if left < time.Second {
		return // found as it ends (a grant refused at its last instant): not worth a line saying "0s"
	}
	s.log.Info("no tickd state in this Redis: a first start, or a data loss; nothing is granted for "+
		left.Round(time.Second).String()+", so that no lease it may have forgotten is granted twice", "quarantine_left", left.Round(time.Millisecond).String())
}

func tickAttr(t time.Time) slog.Attr { return slog.Any(KeyTick, tickValue(t)) }

// tickValue formats a tick only when a line is written.
type tickValue time.Time

func (t tickValue) LogValue() slog.Value {
	if time.Time(t).IsZero() {
		return slog.StringValue("")
	}
	return slog.StringValue(time.Time(t).UTC().Format(time.RFC3339))
}

// runHandler is a run's log handler: it puts the run's attributes (task,
// tick, entity, fence, reason) in front of each record's own when the
// record is handled. A run writes one line at info, so formatting them for
// each line costs less than slog's With, which formats them for every run,
// logged or not, and copies the handler. The task and the tick are the same
// for a tick's runs: inner has them in front already, formatted once per
// tick (taskState.runLog).
type runHandler struct {
	inner          slog.Handler
	entity, reason string
	fence          int64
	extra          []slog.Attr // WithAttrs
}

// own is the run's attributes, in an array: Handle adds them to a record
// without allocating, and with the two of a run's end they fit in a
// record's own array (slog.Record keeps five).
func (h *runHandler) own() [3]slog.Attr {
	return [3]slog.Attr{slog.String(KeyEntity, h.entity), slog.Int64(KeyFence, h.fence), slog.String(KeyReason, h.reason)}
}

func (h *runHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *runHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	own := h.own()
	out.AddAttrs(own[:]...)
	out.AddAttrs(h.extra...)
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	return h.inner.Handle(ctx, out)
}

// WithAttrs and WithGroup are for a handler's own logger (tasks.Run.Logger):
// the run's attributes stay outside its groups.
func (h *runHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.extra = append(h.extra[:len(h.extra):len(h.extra)], as...)
	return &c
}

func (h *runHandler) WithGroup(name string) slog.Handler {
	own := h.own()
	return h.inner.WithAttrs(append(own[:], h.extra...)).WithGroup(name)
}

// runLog is what the runs of a task and tick share in their log lines: the
// handler with the task and the tick in front.
type runLog struct {
	t time.Time
	h slog.Handler
}

// runLog returns the runs' handler for tick t (zero for a run that is not a
// tick's), made from inner once per tick: a tick's runs share it, and the
// runs of no tick share another.
func (ts *taskState) runLog(inner slog.Handler, t time.Time) slog.Handler {
	c := &ts.tickLog
	if t.IsZero() {
		c = &ts.noTickLog
	}
	if l := c.Load(); l != nil && l.t.Equal(t) {
		return l.h
	}
	l := &runLog{t: t, h: inner.WithAttrs([]slog.Attr{slog.String(KeyTask, ts.t.Name), tickAttr(t)})}
	c.Store(l)
	return l.h
}
