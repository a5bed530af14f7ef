package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// TestChartAxisLabelsNeverOverlap: the time axis labels only where they
// fit: under a few bars the newest's label would run over the oldest's
// (seen with 4 ticks), so there is one; under many, three.
func TestChartAxisLabelsNeverOverlap(t *testing.T) {
	ticks := func(n int, every time.Duration) []history.TickView {
		vs := make([]history.TickView, n)
		T := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
		for i := range vs {
			vs[n-1-i] = history.TickView{TickRecord: driver.TickRecord{Tick: T.Add(time.Duration(i) * every)}, State: history.TickComplete}
		}
		return vs
	}
	for _, c := range []struct {
		n      int
		every  time.Duration
		labels int
	}{{1, time.Minute, 1}, {4, time.Minute, 1}, {4, 12 * time.Hour, 1}, {12, time.Minute, 3}, {12, 12 * time.Hour, 2}, {40, time.Minute, 3}, {40, 12 * time.Hour, 3}} {
		ch := chartOf(ticks(c.n, c.every)).withAxis(time.UTC)
		expect.Equal(t, fmt.Sprintf("%d ticks %v apart: labels %v", c.n, c.every, ch.Axis), len(ch.Axis), c.labels)
		for i := 1; i < len(ch.Axis); i++ { // left edges: start at X, middle at X-w/2, end at X-w
			left := func(l axisLabel) int {
				w := labelWidth(l.Text)
				return map[string]int{"start": l.X, "middle": l.X - w/2, "end": l.X - w}[l.Anchor]
			}
			prevEnd := left(ch.Axis[i-1]) + labelWidth(ch.Axis[i-1].Text)
			expect.True(t, fmt.Sprintf("%d ticks: label %q starts after %q ends", c.n, ch.Axis[i].Text, ch.Axis[i-1].Text), left(ch.Axis[i]) >= prevEnd)
		}
	}
}

// TestChartShowsWaitingAndStopped: a tick's bar shows its runs still
// waiting for a limit and the entities a stop cut off, each in a class of
// its own (a colour, and the legend's), above its runs.
func TestChartShowsWaitingAndStopped(t *testing.T) {
	rec := driver.TickRecord{Tick: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC), Parts: []driver.TickPart{{Replica: "r", Final: true, Entities: 10, Started: 4,
		Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 4}, Skipped: map[string]int{driver.SkipLimited: 3, history.SkipStopped: 3}}}}
	ch := chartOf([]history.TickView{{TickRecord: rec, State: history.TickWaiting}})
	var classes []string
	for _, p := range ch.Bars[0].Parts {
		classes = append(classes, p.Class)
	}
	expect.Equal(t, "the bar's parts", strings.Join(classes, " "), "done skip-limited skip-stopped")
}
