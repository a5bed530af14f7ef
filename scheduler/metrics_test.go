package scheduler

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestQuarantinedTickIsNotGood: a tick whose entities were left out for the
// data-loss quarantine does not move tickd_last_good_tick_timestamp_seconds
// (an alert on its age must see that the tick did not run), and is counted
// as a skip with the cause quarantined.
func TestQuarantinedTickIsNotGood(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.task("t")
	good := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.ticked("t", good, TickCounts{Entities: 2, Started: 2}, nil)
	m.ticked("t", good.Add(time.Minute), TickCounts{Entities: 2, Quarantined: 2}, nil)
	if got := testutil.ToFloat64(m.LastGoodTick.WithLabelValues("t")); got != float64(good.Unix()) {
		t.Errorf("last good tick %v, want %v: the quarantined tick moved it", got, good.Unix())
	}
	if got := testutil.ToFloat64(m.Skips.WithLabelValues("t", "quarantined")); got != 2 {
		t.Errorf("skips{cause=quarantined} = %v, want 2", got)
	}
}
