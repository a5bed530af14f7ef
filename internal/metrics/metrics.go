// Package metrics holds the scheduler's Prometheus collectors: New
// registers them, and the scheduler records into them
// (scheduler.Options.Metrics). It is a package of its own so that a
// program embedding the scheduler without Prometheus links none of it.
package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/scheduler"
)

// Collectors are the scheduler's Prometheus collectors. Labels are per
// task, never per entity, so cardinality stays bounded. A nil *Collectors
// records nothing. It is a scheduler.Metrics.
type Collectors struct {
	Runs          *prometheus.CounterVec   // task, reason, outcome
	RunDuration   *prometheus.HistogramVec // task
	Skips         *prometheus.CounterVec   // task, cause: busy, already_ran, paused, quarantined, not_acknowledged
	Reschedules   *prometheus.CounterVec   // task
	Retries       *prometheus.CounterVec   // task
	TickLag       *prometheus.HistogramVec // task: run start minus tick
	EntitiesTick  *prometheus.GaugeVec     // task: entities in the last tick
	RedisErrors   *prometheus.CounterVec   // op: acquire, renew, take, enqueue, paused
	LeaseRenewals prometheus.Counter
	LeaseLosses   *prometheus.CounterVec // task
	DueDepth      prometheus.Gauge
	ActiveRuns    prometheus.Gauge
	// SourceFailures counts ticks whose entity source failed (a missing
	// entities_file, an entities_command that failed).
	SourceFailures *prometheus.CounterVec // task
	TaskPaused     *prometheus.GaugeVec   // task: 1 while paused
	// LastGoodTick is when the task's last tick fanned out without a store
	// or source error (Unix seconds of the tick): alert on its age.
	LastGoodTick *prometheus.GaugeVec // task
	// From the history, read every Options.HealthPoll: the last complete tick's
	// runs by outcome (of every replica), and the flags.
	LastTickRuns *prometheus.GaugeVec // task, outcome
	NotFiring    *prometheus.GaugeVec // task: 1 while no tick is recorded where one was due
	Failing      *prometheus.GaugeVec // task: 1 while the last flag_after ticks' runs all failed
	Starved      *prometheus.GaugeVec // task: 1 while the last flag_after ticks ran nothing
	// HandlerOverruns counts, by task, Go handler runs still going a grace
	// after their context was cancelled.
	HandlerOverruns *prometheus.CounterVec
	// Per limit ([[limits]]): limitmetrics.go.
	LimitRuns       *prometheus.GaugeVec   // limit: runs under it across the replicas
	LimitWaits      *prometheus.CounterVec // limit, why: runs that waited for it
	LimitBackoffs   *prometheus.CounterVec // limit: back-offs an API asked for
	LimitClosed     *prometheus.GaugeVec   // limit: seconds until its budgets open again
	LimitOldestWait *prometheus.GaugeVec   // limit, task: the oldest waiting run's age
	LimitGroups     *prometheus.GaugeVec   // limit, state (waiting, starved): a fair limit's groups
	LimitGroupWait  *prometheus.GaugeVec   // limit, group: the top groups' oldest waiting run's age
	LimitGroupShare *prometheus.GaugeVec   // limit, group: the top groups' share of the last minute's starts
}

// redisOps are the values of RedisErrors' op label.
var redisOps = []string{"acquire", "renew", "take", "enqueue", "paused", "announce", "history"}

var _ scheduler.Metrics = (*Collectors)(nil)

// New creates the collectors and registers them with reg. It returns an
// error, and registers nothing, when reg is nil or already holds tickd's
// metrics (a second tickd in one registry: give each a
// prometheus.WrapRegistererWith of its own label).
func New(reg prometheus.Registerer) (*Collectors, error) {
	if reg == nil {
		return nil, errors.New("metrics: no prometheus.Registerer given (prometheus.NewRegistry() makes one; for no metrics, leave scheduler.Options.Metrics unset)")
	}
	m := &Collectors{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_runs_total",
			Help: "Finished runs by task, reason and outcome."}, []string{"task", "reason", "outcome"}),
		RunDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tickd_run_duration_seconds",
			Help: "Run durations.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 12)}, []string{"task"}), // to 11.6h
		Skips: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_skips_total",
			Help: "Entities not run at a tick, by cause (busy, already_ran, paused)."}, []string{"task", "cause"}),
		Reschedules: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_reschedules_total",
			Help: "Reschedules requested by runs."}, []string{"task"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_retries_total",
			Help: "Retries scheduled for failed runs."}, []string{"task"}),
		TickLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tickd_tick_lag_seconds",
			Help: "Start of a tick run minus its tick.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"task"}),
		EntitiesTick: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_entities_per_tick",
			Help: "Entities read at the task's last tick."}, []string{"task"}),
		RedisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_redis_errors_total",
			Help: "Failed Redis operations, by op: acquire, renew, take (due set), enqueue, paused."}, []string{"op"}),
		LeaseRenewals: prometheus.NewCounter(prometheus.CounterOpts{Name: "tickd_lease_renewal_rounds_total",
			Help: "Successful lease renewal rounds (one pipelined round renews every due lease)."}),
		LeaseLosses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_lease_losses_total",
			Help: "Runs stopped because their lease was lost or untrusted."}, []string{"task"}),
		DueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickd_due_entries",
			Help: "Pending reschedules, retries, triggers and follow-ups of all tasks, read from the shared Redis: every replica exports the same number, so aggregate with max, not sum."}),
		ActiveRuns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickd_active_runs",
			Help: "Runs going on in this process."}),
		SourceFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_source_failures_total",
			Help: "Ticks whose entity source failed."}, []string{"task"}),
		TaskPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_task_paused",
			Help: "1 while the task is paused (tickd pause)."}, []string{"task"}),
		LastGoodTick: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_last_good_tick_timestamp_seconds",
			Help: "The last tick that fanned out without a store or source error, and with no entity left out for a data-loss quarantine."}, []string{"task"}),
	}
	m.LastTickRuns = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_last_tick_runs",
		Help: "The task's last complete tick (all replicas): its runs by outcome, from the history."}, []string{"task", "outcome"})
	m.NotFiring = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_task_not_firing",
		Help: "1 while the task is not firing: no replica runs it, or a tick its schedule expected has no record (paused tasks are 0)."}, []string{"task"})
	m.Failing = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_task_failing",
		Help: "1 while the task's last flag_after ticks' runs all failed."}, []string{"task"})
	m.Starved = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_task_starved",
		Help: "1 while the task's last flag_after ticks ran nothing (every entity skipped, or none listed)."}, []string{"task"})
	m.HandlerOverruns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_handler_overruns_total",
		Help: "Go handler runs still going a grace after their context was cancelled (the handler does not honour ctx: its entity may run elsewhere meanwhile)."}, []string{"task"})
	all := []prometheus.Collector{m.Runs, m.RunDuration, m.Skips, m.Reschedules, m.Retries, m.TickLag, m.EntitiesTick,
		m.RedisErrors, m.LeaseRenewals, m.LeaseLosses, m.DueDepth, m.ActiveRuns, m.SourceFailures, m.TaskPaused, m.LastGoodTick,
		m.LastTickRuns, m.NotFiring, m.Failing, m.Starved, m.HandlerOverruns}
	all = append(all, m.limitMetrics()...)
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("metrics: %w (one tickd per registry; several share one through prometheus.WrapRegistererWith, a label each)", err)
		}
	}
	for _, op := range redisOps {
		m.RedisErrors.WithLabelValues(op)
	}
	return m, nil
}

// Task creates a task's series at zero, so that a counter exists before
// its first increment (a rate or an alert on it works from the start).
func (m *Collectors) Task(name string) {
	if m == nil {
		return
	}
	for _, c := range []*prometheus.CounterVec{m.Reschedules, m.Retries, m.LeaseLosses, m.SourceFailures} {
		c.WithLabelValues(name)
	}
	for _, cause := range []string{"busy", "already_ran", "paused", "quarantined", "not_acknowledged"} {
		m.Skips.WithLabelValues(name, cause)
	}
	m.TaskPaused.WithLabelValues(name)
}

// Paused sets whether task is paused.
func (m *Collectors) Paused(task string, paused bool) {
	if m != nil {
		v := 0.0
		if paused {
			v = 1
		}
		m.TaskPaused.WithLabelValues(task).Set(v)
	}
}

// Ticked records a tick's end: its source's failure, or a good tick.
func (m *Collectors) Ticked(task string, T time.Time, n scheduler.TickCounts, sourceErr error) {
	if m == nil {
		return
	}
	m.EntitiesTick.WithLabelValues(task).Set(float64(n.Entities))
	m.Skipped(task, "busy", n.Busy)
	m.Skipped(task, "already_ran", n.AlreadyRan)
	m.Skipped(task, "quarantined", n.Quarantined)
	m.Skipped(task, "not_acknowledged", n.Unacknowledged)
	if sourceErr != nil {
		m.SourceFailures.WithLabelValues(task).Inc()
	} else if n.Errors == 0 && n.Quarantined == 0 {
		m.LastGoodTick.WithLabelValues(task).Set(float64(T.Unix()))
	}
}

// Ran counts a run that ended, by its reason and outcome, and its duration.
func (m *Collectors) Ran(task string, reason driver.Reason, outcome driver.Outcome, d time.Duration) {
	if m == nil {
		return
	}
	m.Runs.WithLabelValues(task, string(reason), string(outcome)).Inc()
	m.RunDuration.WithLabelValues(task).Observe(d.Seconds())
	switch outcome {
	case driver.OutcomeReschedule:
		m.Reschedules.WithLabelValues(task).Inc()
	case driver.OutcomeLeaseLost:
		m.LeaseLosses.WithLabelValues(task).Inc()
	}
}

// Skipped counts n entities of task not run at a tick, by cause.
func (m *Collectors) Skipped(task, cause string, n int) {
	if m != nil && n > 0 {
		m.Skips.WithLabelValues(task, cause).Add(float64(n))
	}
}

// Lag observes a tick run's start minus its tick.
func (m *Collectors) Lag(task string, d time.Duration) {
	if m != nil {
		m.TickLag.WithLabelValues(task).Observe(max(d, 0).Seconds())
	}
}

// Retried counts a retry scheduled for a failed run.
func (m *Collectors) Retried(task string) {
	if m != nil {
		m.Retries.WithLabelValues(task).Inc()
	}
}

// RedisError counts one failed Redis operation of kind op (redisOps).
func (m *Collectors) RedisError(op string) {
	if m != nil {
		m.RedisErrors.WithLabelValues(op).Inc()
	}
}

// Overran counts a Go handler run of task still going a grace after its
// context was cancelled.
func (m *Collectors) Overran(task string) {
	if m != nil {
		m.HandlerOverruns.WithLabelValues(task).Inc()
	}
}

// Renewed counts one successful renewal round.
func (m *Collectors) Renewed() {
	if m != nil {
		m.LeaseRenewals.Inc()
	}
}

// Active sets the runs going on in this process.
func (m *Collectors) Active(n int64) {
	if m != nil {
		m.ActiveRuns.Set(float64(n))
	}
}

// Due sets the due set's size.
func (m *Collectors) Due(n int) {
	if m != nil {
		m.DueDepth.Set(float64(n))
	}
}

// Forget drops a task's health series: it is no longer in the config nor
// in the task registry.
func (m *Collectors) Forget(task string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.GaugeVec{m.NotFiring, m.Failing, m.Starved, m.LastTickRuns} {
		v.DeletePartialMatch(prometheus.Labels{"task": task})
	}
}

// Health publishes what the history says of task: its last complete tick's
// runs by outcome, and its flags.
func (m *Collectors) Health(task string, views []history.TickView, h history.Health) {
	if m == nil {
		return
	}
	b := map[bool]float64{true: 1}
	m.NotFiring.WithLabelValues(task).Set(b[h.NotFiring != ""])
	m.Failing.WithLabelValues(task).Set(b[h.Failing])
	m.Starved.WithLabelValues(task).Set(b[h.Starved])
	for _, v := range views {
		if v.State != history.TickComplete {
			continue
		}
		outcomes := v.Outcomes()
		for _, o := range driver.AllOutcomes() {
			m.LastTickRuns.WithLabelValues(task, string(o)).Set(float64(outcomes[o]))
		}
		return
	}
}
