package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/scheduler"
)

func mustNew(t *testing.T, reg prometheus.Registerer) *Collectors {
	t.Helper()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRegisteredOnceOrAnError: a nil registry, or tickd's metrics
// registered in one a second time (two tickds in one process), is an
// error, not a panic; the second registration leaves the registry as it
// was. Two tickds share one registry through a label each.
func TestRegisteredOnceOrAnError(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New(nil): no error")
	}
	reg := prometheus.NewRegistry()
	first := mustNew(t, reg)
	if _, err := New(reg); err == nil || !strings.Contains(err.Error(), "WrapRegistererWith") {
		t.Errorf("a second New on one registry: %v, want an error saying how to share it", err)
	}
	first.Ran("t", driver.ReasonTick, driver.OutcomeDone, time.Second)
	if n := testutil.CollectAndCount(first.Runs); n != 1 {
		t.Errorf("the first's runs after the second failed: %d series, want 1", n)
	}
	shared := prometheus.NewRegistry()
	for _, instance := range []string{"a", "b"} {
		mustNew(t, prometheus.WrapRegistererWith(prometheus.Labels{"instance": instance}, shared))
	}
}

// TestQuarantinedTickIsNotGood: a tick whose entities were left out for the
// data-loss quarantine does not move tickd_last_good_tick_timestamp_seconds
// (an alert on its age must see that the tick did not run), and is counted
// as a skip with the cause quarantined.
func TestQuarantinedTickIsNotGood(t *testing.T) {
	m := mustNew(t, prometheus.NewRegistry())
	m.Task("t")
	good := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Ticked("t", good, scheduler.TickCounts{Entities: 2, Started: 2}, nil)
	m.Ticked("t", good.Add(time.Minute), scheduler.TickCounts{Entities: 2, Quarantined: 2}, nil)
	if got := testutil.ToFloat64(m.LastGoodTick.WithLabelValues("t")); got != float64(good.Unix()) {
		t.Errorf("last good tick %v, want %v: the quarantined tick moved it", got, good.Unix())
	}
	if got := testutil.ToFloat64(m.Skips.WithLabelValues("t", "quarantined")); got != 2 {
		t.Errorf("skips{cause=quarantined} = %v, want 2", got)
	}
}

// TestHealth: a task's flags and its last complete tick's runs by outcome
// become gauges, and Forget drops them.
func TestHealth(t *testing.T) {
	m := mustNew(t, prometheus.NewRegistry())
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	complete := history.TickView{State: history.TickComplete, TickRecord: driver.TickRecord{Tick: tick,
		Parts: []driver.TickPart{{Replica: "r", Final: true, Started: 2, Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 1, driver.OutcomeFailed: 1}}}}}
	m.Health("t", []history.TickView{{State: history.TickRunning}, complete}, history.Health{Starved: true})
	for o, want := range map[string]float64{"done": 1, "failed": 1, "timeout": 0} {
		if got := testutil.ToFloat64(m.LastTickRuns.WithLabelValues("t", o)); got != want {
			t.Errorf("last tick runs{outcome=%s} = %v, want %v", o, got, want)
		}
	}
	if testutil.ToFloat64(m.Starved.WithLabelValues("t")) != 1 || testutil.ToFloat64(m.NotFiring.WithLabelValues("t")) != 0 {
		t.Error("starved should be 1 and not firing 0")
	}
	m.Forget("t")
	if n := testutil.CollectAndCount(m.Starved); n != 0 {
		t.Errorf("%d starved series after Forget, want 0", n)
	}
}
