package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickd/tickd/internal/lease"
)

// limitMetrics creates the collectors per limit, for New to register.
func (m *Collectors) limitMetrics() []prometheus.Collector {
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
	m.LimitGroups = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_limit_groups",
		Help: "A fair limit's groups (fair_by) with runs waiting (state waiting), and those of them that got less than half their fair share of the last minute's starts while they waited all along (state starved)."}, []string{"limit", "state"})
	m.LimitGroupWait = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_limit_group_oldest_wait_seconds",
		Help: "How long the oldest waiting run of each of a fair limit's groups that waited longest (the top 5, not every group) has waited."}, []string{"limit", "group"})
	m.LimitGroupShare = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_limit_group_share",
		Help: "The share of a fair limit's starts of the last minute that each of its groups that waited longest (the top 5) got, 0 to 1."}, []string{"limit", "group"})
	return []prometheus.Collector{m.LimitRuns, m.LimitWaits, m.LimitBackoffs, m.LimitClosed, m.LimitOldestWait, m.LimitGroups, m.LimitGroupWait, m.LimitGroupShare}
}

// TopGroups is how many of a fair limit's groups have series of their own:
// those that waited longest.
const TopGroups = 5

// limitGroups publishes a fair limit's groups: how many wait and are
// starved, and the top ones' waits and shares.
func (m *Collectors) limitGroups(limit string, st lease.LimitStatus) {
	m.LimitGroupWait.DeletePartialMatch(prometheus.Labels{"limit": limit})
	m.LimitGroupShare.DeletePartialMatch(prometheus.Labels{"limit": limit})
	if st.Limit.Fair {
		m.LimitGroups.WithLabelValues(limit, "waiting").Set(float64(st.GroupsWaiting))
		m.LimitGroups.WithLabelValues(limit, "starved").Set(float64(st.Starved))
	} else {
		m.LimitGroups.DeletePartialMatch(prometheus.Labels{"limit": limit})
	}
	for _, g := range st.Groups[:min(len(st.Groups), TopGroups)] {
		g.Name = strings.ToValidUTF8(g.Name, "\uFFFD") // a label is UTF-8
		m.LimitGroupWait.WithLabelValues(limit, g.Name).Set(max(0, time.Since(g.Oldest).Seconds()))
		m.LimitGroupShare.WithLabelValues(limit, g.Name).Set(float64(g.Started) / float64(max(st.Starts, 1)))
	}
}

// LimitWait counts a run that waited for limit, by why: concurrency, rate,
// closed.
func (m *Collectors) LimitWait(limit, why string) {
	if m != nil && limit != "" {
		m.LimitWaits.WithLabelValues(limit, why).Inc()
	}
}

// BackedOff counts a run whose API asked limit to back off.
func (m *Collectors) BackedOff(limit string) {
	if m != nil {
		m.LimitBackoffs.WithLabelValues(limit).Inc()
	}
}

// Limit publishes what the store says of limit: its runs across the
// replicas, how long it stays closed, and each task's oldest waiting run.
func (m *Collectors) Limit(limit string, st lease.LimitStatus) {
	if m == nil {
		return
	}
	m.LimitRuns.WithLabelValues(limit).Set(float64(st.Runs))
	closed := time.Duration(0)
	for _, c := range st.Closed {
		closed = max(closed, time.Until(c.Until))
	}
	m.LimitClosed.WithLabelValues(limit).Set(closed.Seconds())
	oldest := map[string]time.Time{}
	for _, w := range st.Oldest { // oldest first
		if _, ok := oldest[w.Task]; !ok {
			oldest[w.Task] = w.Since
		}
	}
	m.LimitOldestWait.DeletePartialMatch(prometheus.Labels{"limit": limit})
	for task, since := range oldest {
		m.LimitOldestWait.WithLabelValues(limit, task).Set(max(0, time.Since(since).Seconds()))
	}
	m.limitGroups(limit, st)
}
