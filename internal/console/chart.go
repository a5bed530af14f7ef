package console

import (
	"fmt"
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/lease/driver"
)

// chart is the task page's chart of its recent ticks: a bar per tick,
// oldest left, its runs stacked by outcome (an SVG drawn on the server).
type chart struct {
	Width, Height int
	Bars          []bar
	Max           int
	// Axis labels the time axis below the bars (withAxis); AxisHeight is
	// the SVG's height with it.
	Axis       []axisLabel
	AxisHeight int
}

// axisLabel is a time under the chart: X is where, Anchor the SVG
// text-anchor (start, middle, end).
type axisLabel struct {
	X      int
	Text   string
	Anchor string
}

// withAxis labels the chart's oldest, middle and newest ticks in loc: times
// of day when every tick is on one day there, else dates too.
func (ch chart) withAxis(loc *time.Location) chart {
	ch.AxisHeight = ch.Height + 18
	ch.Width = max(ch.Width, 160) // room for a label under a few bars
	n := len(ch.Bars)
	if n == 0 {
		return ch
	}
	layout := "15:04:05"
	first, last := ch.Bars[0].Tick.Tick.In(loc), ch.Bars[n-1].Tick.Tick.In(loc)
	if first.YearDay() != last.YearDay() || first.Year() != last.Year() {
		layout = "Jan 2 15:04"
	}
	label := func(i int, anchor string) axisLabel {
		x := ch.Bars[i].X + barW/2
		switch anchor {
		case "start":
			x = ch.Bars[i].X
		case "end":
			x = ch.Bars[i].X + barW
		}
		return axisLabel{X: x, Text: ch.Bars[i].Tick.Tick.In(loc).Format(layout), Anchor: anchor}
	}
	// Labels only where they fit: with few bars, the bars span less than
	// two labels, and the newest's would run over the oldest's.
	first0 := label(0, "start")
	span := ch.Bars[n-1].X + barW - ch.Bars[0].X
	w := labelWidth(first0.Text)
	ch.Axis = append(ch.Axis, first0)
	if n >= 12 && span >= 3*w+2*labelGap {
		ch.Axis = append(ch.Axis, label(n/2, "middle"))
	}
	if n >= 2 && span >= 2*w+labelGap {
		ch.Axis = append(ch.Axis, label(n-1, "end"))
	}
	return ch
}

// labelWidth is about how wide an axis label is, in px (11px text); and
// labelGap the least room between two.
func labelWidth(text string) int { return 7 * len(text) }

const labelGap = 8

type bar struct {
	X     int
	Tick  history.TickView
	Parts []barPart
	Label string // the tick, its counts, lag and duration, for the title
}

type barPart struct {
	Class   string // the outcome, for its colour
	Y, H    int
	Outcome string
	N       int
}

const chartH, barW = 120, 14

func chartOf(ticks []history.TickView) chart {
	ch := chart{Height: chartH, Width: max(len(ticks), 1) * (barW + 2)}
	for _, v := range ticks {
		ch.Max = max(ch.Max, v.Runs(), v.Entities())
	}
	scale := float64(chartH-10) / float64(max(ch.Max, 1))
	for i := range ticks {
		v := ticks[len(ticks)-1-i]
		b := bar{X: i * (barW + 2), Tick: v}
		y := chartH
		os := v.Outcomes()
		for _, o := range driver.AllOutcomes() {
			n := os[o]
			if n == 0 {
				continue
			}
			h := max(1, int(float64(n)*scale))
			y -= h
			b.Parts = append(b.Parts, barPart{Class: string(o), Y: y, H: h, Outcome: string(o), N: n})
		}
		// What did not run for a reason a look should catch: runs still
		// waiting for a limit, and entities a stop cut off (above the runs,
		// hatched by the style).
		sk := v.Skipped()
		for _, k := range []string{driver.SkipLimited, history.SkipStopped} {
			if n := sk[k]; n > 0 {
				h := max(1, int(float64(n)*scale))
				y -= h
				b.Parts = append(b.Parts, barPart{Class: "skip-" + k, Y: max(y, 0), H: h, Outcome: k, N: n})
			}
		}
		b.Label = fmt.Sprintf("%s %s: %s (%s), lag %s, duration %s", v.Tick.UTC().Format(time.RFC3339), v.State,
			count(v.Runs(), "run"), history.Counts(os, "none"), history.Millis(v.FirstStart()), history.Millis(v.LastEnd()))
		if v.Pause != nil {
			b.Label = fmt.Sprintf("%s paused by %s: %s", v.Tick.UTC().Format(time.RFC3339), v.Pause.By, v.Pause.Reason)
		}
		ch.Bars = append(ch.Bars, b)
	}
	return ch
}

// JSON endpoints: the documents of the -json commands.
