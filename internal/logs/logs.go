// Package logs holds what tickd's log lines share across its packages:
// the attribute keys, the messages a checker reads, and a limiter for the
// lines about failures that repeat. Every line goes through log/slog.
package logs

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

// Tick is a tick as a line's attribute (KeyTick), in UTC, RFC 3339;
// formatted only when a line is written.
func Tick(t time.Time) slog.Attr { return slog.Any(KeyTick, tickValue(t)) }

type tickValue time.Time

func (t tickValue) LogValue() slog.Value {
	if time.Time(t).IsZero() {
		return slog.StringValue("")
	}
	return slog.StringValue(time.Time(t).UTC().Format(time.RFC3339))
}

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

// MsgKilled is the warning logged when a run's process group did not stop
// within its grace after SIGTERM and was sent SIGKILL: the moment it ended.
const MsgKilled = "run's process killed: it did not stop within its grace after SIGTERM"

// Every is how often a failure that repeats (Redis unreachable, a clock
// ahead) is logged: once, then with a count of the lines suppressed.
const Every = 10 * time.Second

// Limiter lets one line per key through every interval and counts the
// rest, so that a Redis outage is logged, not once per entity per second.
type Limiter struct {
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	hush map[string]int
}

// NewLimiter lets one line per key through every interval.
func NewLimiter(every time.Duration) *Limiter {
	return &Limiter{every: every, last: map[string]time.Time{}, hush: map[string]int{}}
}

// allow reports whether a line for key may be logged now, and how many were
// suppressed since the last one.
func (l *Limiter) allow(key string) (bool, int) {
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
func (l *Limiter) Log(log *slog.Logger, lvl slog.Level, key, msg string, args ...any) {
	ok, n := l.allow(key)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Log(context.Background(), lvl, msg, args...)
}
