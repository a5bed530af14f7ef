package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/tickd/tickd/internal/logs"
)

func (s *Scheduler) logLimited(key, msg string, args ...any) {
	s.logLimit.Log(s.log, slog.LevelError, key, msg, args...)
}

// storeFailed reports a failure of the lease store's op (redisOps): counted,
// observed, and logged at most once per logs.Every for key. about says which task and tick
// it concerns, where one does.
func (s *Scheduler) storeFailed(op, key, msg string, about Event, err error) {
	s.metrics.RedisError(op)
	about.Kind, about.Err = EventStoreError, err
	s.observe(about)
	var attrs []any
	if about.Task != "" {
		attrs = append(attrs, logs.KeyTask, about.Task)
	}
	if !about.Tick.IsZero() {
		attrs = append(attrs, logs.Tick(about.Tick))
	}
	s.logLimited(key, msg, append(attrs, logs.KeyError, err)...)
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
	s.log.Info("no tickd state in this Redis, or it restarted: a first start, a data loss, or a restart that may have loaded an older snapshot; nothing is granted for "+
		left.Round(time.Second).String()+", so that no lease it may have forgotten is granted twice", "quarantine_left", left.Round(time.Millisecond).String())
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
	return [3]slog.Attr{slog.String(logs.KeyEntity, h.entity), slog.Int64(logs.KeyFence, h.fence), slog.String(logs.KeyReason, h.reason)}
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
	l := &runLog{t: t, h: inner.WithAttrs([]slog.Attr{slog.String(logs.KeyTask, ts.t.Name), logs.Tick(t)})}
	c.Store(l)
	return l.h
}
