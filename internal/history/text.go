package history

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

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

// Succeeded says whether tick r, in state (State), went well: it is
// complete, every run it started succeeded, its source listed its
// entities, and no entity was left without its run by a fault.
func Succeeded(r driver.TickRecord, state string) bool {
	if state != TickComplete || r.SourceFailed() {
		return false
	}
	for o, n := range r.Outcomes() {
		if n > 0 && driver.Failed(o) {
			return false
		}
	}
	skipped := r.Skipped()
	return !slices.ContainsFunc(badSkips, func(k string) bool { return skipped[k] > 0 })
}

// Summary says whether tick r of task, in state (State), went well
// (Succeeded) and what it did, in a few lines: a heartbeat's body for an
// outside monitor. An incomplete tick's names the replicas that left
// their part unfinished: those not in live (the replicas whose
// announcement is current).
func Summary(task string, r driver.TickRecord, state string, live map[string]bool) (ok bool, text string) {
	ok = Succeeded(r, state)
	skipped := r.Skipped()
	var b strings.Builder
	fmt.Fprintf(&b, "tickd: %s, tick %s: %s\n", task, r.Tick.UTC().Format(time.RFC3339), state)
	fmt.Fprintf(&b, "entities %d, runs %d: %s\n", r.Entities(), r.Runs(), Counts(r.Outcomes(), "none ended"))
	fmt.Fprintf(&b, "skipped: %s\n", Counts(skipped, "none"))
	if r.SourceFailed() {
		fmt.Fprintf(&b, "entity source failed: %s\n", r.SourceError())
	}
	fmt.Fprintf(&b, "first start %s, last end %s after the tick; replicas %s\n", Millis(r.FirstStart()), Millis(r.LastEnd()), strings.Join(r.Replicas(), ", "))
	if state == TickIncomplete {
		var gone []string
		for _, p := range r.Parts {
			if !p.Final && !live[p.Replica] && !slices.Contains(gone, p.Replica) {
				gone = append(gone, p.Replica)
			}
		}
		fmt.Fprintf(&b, "unfinished: the part of %s, gone with its runs\n", strings.Join(gone, ", "))
	}
	return ok, b.String()
}

// FailedEntities is the line a tick's summary ends with when runs of it
// failed: the entities of fs (a task's recent failures) whose run of tick
// T failed, at most limit of them, and how many more.
func FailedEntities(fs []driver.Failure, T time.Time, limit int) string {
	var ids []string
	seen := map[string]bool{}
	more := 0
	for _, f := range fs {
		if !f.Tick.Equal(T) || seen[f.Entity] {
			continue
		}
		seen[f.Entity] = true
		if len(ids) == limit {
			more++
			continue
		}
		ids = append(ids, fmt.Sprintf("%q", f.Entity))
	}
	if len(ids) == 0 {
		return ""
	}
	line := "failed: " + strings.Join(ids, ", ")
	if more > 0 {
		line += fmt.Sprintf(" and %d more", more)
	}
	return line + " (tickd history -failures)\n"
}

// lateAfter is how late a tick's first run may start and still be on time.
const lateAfter = time.Second

// Reason says, in a few words, why tick v is what it is: for a tick that
// ran, "on time" or "late by 2.1s" (its first run's start); else what
// kept it from running: "paused", "missed" (no replica fanned it out),
// "incomplete" (a replica is gone with its runs), "limited" (runs wait
// for a limit), "running", or, for a tick that started no run, why: the
// skip that kept most of its entities ("quarantined", "not acknowledged",
// "busy", "already ran", "stopped", "error"…), "source failed" or "no
// entities". "" when nothing says why: a record that breaks the history's
// promises.
func Reason(v TickView) string {
	switch v.State {
	case TickPaused, TickMissed, TickIncomplete, TickRunning:
		return v.State
	case TickWaiting:
		return "limited"
	}
	if v.Runs() > 0 {
		if d := v.FirstStart(); d > lateAfter {
			return "late by " + Millis(d)
		}
		return "on time"
	}
	switch {
	case v.SourceFailed():
		return "source failed"
	case v.Entities() == 0:
		return "no entities"
	}
	why, most := "", 0
	for _, k := range slices.Sorted(maps.Keys(v.Skipped())) {
		if n := v.Skipped()[k]; n > most {
			why, most = strings.ReplaceAll(k, "_", " "), n
		}
	}
	return why
}

// Why is Reason where it says more than the state: "" for a missed,
// paused, incomplete or running tick, whose state says it all.
func Why(v TickView) string {
	if r := Reason(v); r != v.State {
		return r
	}
	return ""
}
