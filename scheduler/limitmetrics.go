package scheduler

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// limitMetrics creates and registers the collectors per limit.
func (m *Metrics) limitMetrics(reg prometheus.Registerer) {
	m.LimitRuns = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_limit_runs",
		Help: "Runs holding the limit across every replica, read from the shared Redis: aggregate with max, not sum."}, []string{"limit"})
	m.LimitWaits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_limit_waits_total",
		Help: "Runs that waited for the limit (each time one was refused), by why: concurrency, rate, closed."}, []string{"limit", "why"})
	m.LimitBackoffs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickd_limit_backoffs_total",
		Help: "Runs whose API asked to back off (429, 503, exit 76), closing the limit."}, []string{"limit"})
	m.LimitClosed = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_limit_closed_seconds",
		Help: "Seconds until the limit's budgets closed by an API open again (0: open)."}, []string{"limit"})
	m.LimitOldestWait = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_limit_oldest_wait_seconds",
		Help: "How long the oldest run of the task waiting in the limit's line has waited (since its tick), read from the shared Redis: aggregate with max."}, []string{"limit", "task"})
	reg.MustRegister(m.LimitRuns, m.LimitWaits, m.LimitBackoffs, m.LimitClosed, m.LimitOldestWait)
}

func (m *Metrics) limitWait(limit, why string) {
	if m != nil && limit != "" {
		m.LimitWaits.WithLabelValues(limit, why).Inc()
	}
}

func (m *Metrics) backedOff(limit string) {
	if m != nil {
		m.LimitBackoffs.WithLabelValues(limit).Inc()
	}
}

// publishLimits publishes each limit's runs and how long it stays closed;
// the metrics loop calls it every PausePoll.
func (s *Scheduler) publishLimits(ctx context.Context) {
	m := s.metrics
	if m == nil {
		return
	}
	for _, l := range s.Config().Limits {
		st, err := s.store.LimitStatus(ctx, l.Lease())
		if err != nil {
			continue // the Redis errors are said by the run path
		}
		m.LimitRuns.WithLabelValues(l.Name).Set(float64(st.Runs))
		closed := time.Duration(0)
		for _, c := range st.Closed {
			closed = max(closed, time.Until(c.Until))
		}
		m.LimitClosed.WithLabelValues(l.Name).Set(closed.Seconds())
		oldest := map[string]time.Time{}
		for _, w := range st.Oldest { // oldest first
			if _, ok := oldest[w.Task]; !ok {
				oldest[w.Task] = w.Since
			}
		}
		m.LimitOldestWait.DeletePartialMatch(prometheus.Labels{"limit": l.Name})
		for task, since := range oldest {
			m.LimitOldestWait.WithLabelValues(l.Name, task).Set(max(0, time.Since(since).Seconds()))
		}
	}
}
