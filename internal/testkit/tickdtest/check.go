package tickdtest

import (
	"fmt"
	"sort"
)

// Figures are what the checker computes over a set of runs.
type Figures struct {
	Runs, TickRuns, Reschedules int
	Overlaps                    int // pairs of runs of one (task, entity) whose intervals intersect
	DuplicateTickRuns           int // (task, entity, tick) with more than one tick run
	FenceViolations             int // fences not strictly increasing in start order
	Excused                     int // overlaps CheckExcusing was told are documented
	Examples                    []string
}

func (f Figures) String() string {
	return fmt.Sprintf("runs=%d tick_runs=%d reschedules=%d overlaps=%d duplicate_tick_runs=%d fence_violations=%d",
		f.Runs, f.TickRuns, f.Reschedules, f.Overlaps, f.DuplicateTickRuns, f.FenceViolations)
}

// Check computes the figures. A run without an end record (killed with its
// replica) is taken to last until openEnd(run).
func Check(runs []Run, openEnd func(Run) int64) Figures {
	return CheckExcusing(runs, openEnd, Excuses{})
}

// Excuses are what an operator asked for that Check would otherwise count
// as a fault.
type Excuses struct {
	// Overlap says the overlap of a and b (a started first) is documented
	// (an operator's unlock -force): counted apart, in Excused, not in
	// Overlaps.
	Overlap func(a, b Run) bool
	// Again says how many backfills of every run again (-only all) cover
	// task's tick (RFC 3339, as runs record it): each may run its (entity,
	// tick)s once more.
	Again func(task, tick string) int
}

// CheckExcusing is Check, with what an operator asked for excused (ex).
func CheckExcusing(runs []Run, openEnd func(Run) int64, ex Excuses) Figures {
	var f Figures
	by := map[string][]Run{}
	type tickRuns struct {
		task, tick string
		n          int
	}
	ticks := map[string]*tickRuns{}
	for _, r := range runs {
		k := r.Start.Task + "\x00" + r.Start.Entity
		by[k] = append(by[k], r)
		f.Runs++
		switch r.Start.Reason {
		case "tick", "catch_up", "replaced", "backfill": // a tick's one run: live, caught up, in a holder's place, or backfilled
			f.TickRuns++
			kt := k + "\x00" + r.Start.Tick
			if ticks[kt] == nil {
				ticks[kt] = &tickRuns{task: r.Start.Task, tick: r.Start.Tick}
			}
			ticks[kt].n++
		case "reschedule":
			f.Reschedules++
		}
	}
	for k, t := range ticks {
		allowed := 1
		if ex.Again != nil {
			allowed += ex.Again(t.task, t.tick)
		}
		if t.n > allowed {
			f.DuplicateTickRuns += t.n - allowed
			f.Examples = append(f.Examples, fmt.Sprintf("duplicate tick run %q x%d", k, t.n))
		}
	}
	for _, rs := range by {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start.At < rs[j].Start.At })
		end := func(r Run) int64 {
			if r.End.At == 0 {
				return openEnd(r)
			}
			return r.End.At
		}
		for i := range rs {
			if i > 0 && rs[i].Start.Fence <= rs[i-1].Start.Fence {
				f.FenceViolations++
				f.Examples = append(f.Examples, fmt.Sprintf("fence %d after %d for %s", rs[i].Start.Fence, rs[i-1].Start.Fence, rs[i].Start.Entity))
			}
			for j := i + 1; j < len(rs) && rs[j].Start.At < end(rs[i]); j++ {
				if ex.Overlap != nil && ex.Overlap(rs[i], rs[j]) {
					f.Excused++
					continue
				}
				f.Overlaps++
				f.Examples = append(f.Examples, fmt.Sprintf("overlap on %s: pid %d [%d,%d] and pid %d from %d",
					rs[i].Start.Entity, rs[i].Start.Pid, rs[i].Start.At, end(rs[i]), rs[j].Start.Pid, rs[j].Start.At))
			}
		}
	}
	if len(f.Examples) > 10 {
		f.Examples = f.Examples[:10]
	}
	return f
}
