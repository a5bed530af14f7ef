package scheduler

import (
	"context"
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/lease/driver"
)

// Metrics receives the scheduler's measurements (Options.Metrics).
// Package github.com/tickd/tickd/internal/metrics gives the Prometheus collectors
// tickd exports; the scheduler itself imports no metrics library. Its
// methods are called from many goroutines, and must not block.
type Metrics interface {
	// Task is called when a task starts: its series can start at zero.
	Task(name string)
	// Forget is called when a task is in neither the config nor the
	// registry any more.
	Forget(task string)
	Paused(task string, paused bool)
	// Ticked reports a tick's end: its counts, and its source's failure.
	Ticked(task string, tick time.Time, n TickCounts, sourceErr error)
	// Ran reports a run that ended, and how long it ran.
	Ran(task string, reason driver.Reason, outcome driver.Outcome, d time.Duration)
	// Skipped reports n entities of a tick not run, by cause: busy,
	// already_ran, paused, quarantined, not_acknowledged.
	Skipped(task, cause string, n int)
	// Lag reports a tick run's start minus its tick.
	Lag(task string, d time.Duration)
	Retried(task string)
	// RedisError reports a failed store operation, by op: acquire, renew,
	// take, enqueue, paused, announce, history.
	RedisError(op string)
	// Active reports the runs going on in this process.
	Active(n int64)
	// Due reports the due set's size (every PausePoll).
	Due(n int)
	// Health reports what the history says of a task (every HealthPoll).
	Health(task string, views []history.TickView, h history.Health)
	LimitWait(limit, why string)
	BackedOff(limit string)
	// Limit reports what the store says of a limit (every PausePoll).
	Limit(limit string, st lease.LimitStatus)
	// Overran reports a Go handler run still going HandlerGrace after its
	// context was cancelled.
	Overran(task string)
}

// noMetrics records nothing: the scheduler's Metrics when Options has none.
type noMetrics struct{}

func (noMetrics) Task(string)                                              {}
func (noMetrics) Overran(string)                                           {}
func (noMetrics) Forget(string)                                            {}
func (noMetrics) Paused(string, bool)                                      {}
func (noMetrics) Ticked(string, time.Time, TickCounts, error)              {}
func (noMetrics) Ran(string, driver.Reason, driver.Outcome, time.Duration) {}
func (noMetrics) Skipped(string, string, int)                              {}
func (noMetrics) Lag(string, time.Duration)                                {}
func (noMetrics) Retried(string)                                           {}
func (noMetrics) RedisError(string)                                        {}
func (noMetrics) Active(int64)                                             {}
func (noMetrics) Due(int)                                                  {}
func (noMetrics) Health(string, []history.TickView, history.Health)        {}
func (noMetrics) LimitWait(string, string)                                 {}
func (noMetrics) BackedOff(string)                                         {}
func (noMetrics) Limit(string, lease.LimitStatus)                          {}

// publishLimits publishes each limit's runs, how long it stays closed and
// its oldest waiting runs; the metrics loop calls it every PausePoll.
func (s *Scheduler) publishLimits(ctx context.Context) {
	for _, l := range s.Config().Limits {
		st, err := s.store.Fleet().LimitStatus(ctx, leaseconf.Limit(&l))
		if err != nil {
			continue // the Redis errors are said by the run path
		}
		s.metrics.Limit(l.Name, st)
	}
}
