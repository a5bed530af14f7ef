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

// lazyAttrs is a slog.Handler that adds attrs to what inner handles, but
// formats them (inner.WithAttrs) only when a record is first handled: a
// run's logger carries its task, entity, tick, fence and reason, and a
// fan-out of 100,000 runs logged above their level must not pay for
// formatting them 100,000 times.
type lazyAttrs struct {
	inner slog.Handler
	attrs []slog.Attr
	once  *sync.Once
	with  *slog.Handler
}

func newLazyAttrs(inner slog.Handler, attrs []slog.Attr) slog.Handler {
	return &lazyAttrs{inner: inner, attrs: attrs, once: &sync.Once{}, with: new(slog.Handler)}
}

func (h *lazyAttrs) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	h.once.Do(func() { *h.with = h.inner.WithAttrs(h.attrs) })
	return (*h.with).Handle(ctx, r)
}

func (h *lazyAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return newLazyAttrs(h.inner, append(h.attrs[:len(h.attrs):len(h.attrs)], as...))
}

func (h *lazyAttrs) WithGroup(name string) slog.Handler {
	h.once.Do(func() { *h.with = h.inner.WithAttrs(h.attrs) })
	return (*h.with).WithGroup(name)
}
