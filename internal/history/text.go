package history

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
)

// Counts writes a count map as "done 3, failed 1", by name, or none for an
// empty map.
func Counts[K ~string](m map[K]int, none string) string {
	if len(m) == 0 {
		return none
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// Millis writes a duration from a tick to the millisecond, or "-" for none
// (a negative one: driver.TickPart's FirstStart and LastEnd).
func Millis(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// badSkips are the reasons for an entity left without its run that say a
// fault, not the fleet sharing the tick out or an operator's choice.
var badSkips = []string{SkipError, SkipQuarantined, SkipNotAcknowledged, SkipStopped}

// Summary says whether tick r of task, in state (State), went well (it
// is complete, every run it started succeeded, its source listed its
// entities, and no entity was left without its run by a fault) and what
// it did, in a few lines: a heartbeat's body for an outside monitor.
func Summary(task string, r driver.TickRecord, state string) (ok bool, text string) {
	failed := 0
	for o, n := range r.Outcomes() {
		if lease.Failed(o) {
			failed += n
		}
	}
	skipped := r.Skipped()
	ok = state == TickComplete && failed == 0 && !r.SourceFailed() &&
		!slices.ContainsFunc(badSkips, func(k string) bool { return skipped[k] > 0 })
	var b strings.Builder
	fmt.Fprintf(&b, "tickd: %s, tick %s: %s\n", task, r.Tick.UTC().Format(time.RFC3339), state)
	fmt.Fprintf(&b, "entities %d, runs %d: %s\n", r.Entities(), r.Runs(), Counts(r.Outcomes(), "none ended"))
	fmt.Fprintf(&b, "skipped: %s\n", Counts(skipped, "none"))
	if r.SourceFailed() {
		fmt.Fprintf(&b, "entity source failed: %s\n", r.SourceError())
	}
	fmt.Fprintf(&b, "first start %s, last end %s after the tick; replicas %s\n", Millis(r.FirstStart()), Millis(r.LastEnd()), strings.Join(r.Replicas(), ", "))
	return ok, b.String()
}
