package scheduler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickd/tickd/lease"
)

// Metrics are the scheduler's Prometheus collectors. Labels are per task,
// never per entity, so cardinality stays bounded. A nil *Metrics records
// nothing.
type Metrics struct {
	Runs          *prometheus.CounterVec   // task, reason, outcome
	RunDuration   *prometheus.HistogramVec // task
	Skips         *prometheus.CounterVec   // task, cause: busy, already_ran, paused
	Reschedules   *prometheus.CounterVec   // task
	Retries       *prometheus.CounterVec   // task
	TickLag       *prometheus.HistogramVec // task: run start minus tick
	EntitiesTick  *prometheus.GaugeVec     // task: entities in the last tick
	RedisErrors   prometheus.Counter
	LeaseRenewals prometheus.Counter
	LeaseLosses   *prometheus.CounterVec // task
	DueDepth      prometheus.Gauge
	ActiveRuns    prometheus.Gauge
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_runs_total",
			Help: "Finished runs by task, reason and outcome."}, []string{"task", "reason", "outcome"}),
		RunDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tickd_run_duration_seconds",
			Help: "Run durations.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}, []string{"task"}),
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
		RedisErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tickd_redis_errors_total",
			Help: "Failed Redis operations (acquire, renew, release, due set)."}),
		LeaseRenewals: prometheus.NewCounter(prometheus.CounterOpts{Name: "tickd_lease_renewal_rounds_total",
			Help: "Successful lease renewal rounds (one pipelined round renews every due lease)."}),
		LeaseLosses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_lease_losses_total",
			Help: "Runs stopped because their lease was lost or untrusted."}, []string{"task"}),
		DueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickd_due_entries",
			Help: "Pending reschedules, retries, triggers and follow-ups (all tasks)."}),
		ActiveRuns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickd_active_runs",
			Help: "Runs going on in this process."}),
	}
	reg.MustRegister(m.Runs, m.RunDuration, m.Skips, m.Reschedules, m.Retries, m.TickLag, m.EntitiesTick,
		m.RedisErrors, m.LeaseRenewals, m.LeaseLosses, m.DueDepth, m.ActiveRuns)
	return m
}

func (m *Metrics) run(task string, reason lease.Reason, outcome lease.Outcome, d time.Duration) {
	if m == nil {
		return
	}
	m.Runs.WithLabelValues(task, string(reason), string(outcome)).Inc()
	m.RunDuration.WithLabelValues(task).Observe(d.Seconds())
	switch outcome {
	case lease.OutcomeReschedule:
		m.Reschedules.WithLabelValues(task).Inc()
	case lease.OutcomeLeaseLost:
		m.LeaseLosses.WithLabelValues(task).Inc()
	}
}

func (m *Metrics) skip(task, cause string, n int) {
	if m != nil && n > 0 {
		m.Skips.WithLabelValues(task, cause).Add(float64(n))
	}
}

func (m *Metrics) tick(task string, entities int) {
	if m != nil {
		m.EntitiesTick.WithLabelValues(task).Set(float64(entities))
	}
}

func (m *Metrics) lag(task string, d time.Duration) {
	if m != nil {
		m.TickLag.WithLabelValues(task).Observe(max(d, 0).Seconds())
	}
}

func (m *Metrics) retry(task string) {
	if m != nil {
		m.Retries.WithLabelValues(task).Inc()
	}
}

// RedisError counts one failed Redis operation.
func (m *Metrics) RedisError() {
	if m != nil {
		m.RedisErrors.Inc()
	}
}

// Renewed counts one successful renewal round.
func (m *Metrics) Renewed() {
	if m != nil {
		m.LeaseRenewals.Inc()
	}
}

func (m *Metrics) active(n int64) {
	if m != nil {
		m.ActiveRuns.Set(float64(n))
	}
}

func (m *Metrics) due(n int) {
	if m != nil {
		m.DueDepth.Set(float64(n))
	}
}
