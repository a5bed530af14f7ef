package tickdtest

import (
	"os"
	"path/filepath"
	"testing"
)

// rec is one worker record of task t.
func rec(ev, entity, tick, reason string, fence int64, pid int, at int64) Record {
	return Record{Event: ev, Task: "t", Entity: entity, Tick: tick, Reason: reason, Fence: fence, Pid: pid, At: at}
}

// run is a run of entity from..to (to 0: never ended).
func run(entity, tick, reason string, fence int64, pid int, from, to int64) Run {
	r := Run{Start: rec("start", entity, tick, reason, fence, pid, from)}
	if to != 0 {
		r.End = rec("end", entity, tick, reason, fence, pid, to)
	}
	return r
}

// TestCheck: the checker is the judge of every guarantee the fault suite
// measures, so each figure is tested alone, on both sides of its line.
func TestCheck(t *testing.T) {
	cases := []struct {
		name string
		runs []Run
		want Figures
	}{
		{"clean: one run after the other", []Run{
			run("a", "T1", "tick", 1, 1, 100, 200),
			run("a", "T2", "tick", 2, 2, 200, 300), // starts as the first ends: no overlap
		}, Figures{Runs: 2, TickRuns: 2}},
		{"overlap", []Run{
			run("a", "T1", "tick", 1, 1, 100, 200),
			run("a", "T2", "tick", 2, 2, 199, 300),
		}, Figures{Runs: 2, TickRuns: 2, Overlaps: 1}},
		{"other entities never overlap", []Run{
			run("a", "T1", "tick", 1, 1, 100, 200),
			run("b", "T1", "tick", 1, 2, 100, 200),
		}, Figures{Runs: 2, TickRuns: 2}},
		{"duplicate tick run, apart in time", []Run{
			run("a", "T1", "tick", 1, 1, 100, 200),
			run("a", "T1", "tick", 2, 2, 300, 400),
		}, Figures{Runs: 2, TickRuns: 2, DuplicateTickRuns: 1}},
		{"a reschedule of the same tick is no duplicate", []Run{
			run("a", "T1", "tick", 1, 1, 100, 200),
			run("a", "T1", "reschedule", 2, 2, 300, 400),
		}, Figures{Runs: 2, TickRuns: 1, Reschedules: 1}},
		{"fence going back", []Run{
			run("a", "T1", "tick", 5, 1, 100, 200),
			run("a", "T2", "tick", 5, 2, 300, 400),
		}, Figures{Runs: 2, TickRuns: 2, FenceViolations: 1}},
		{"a run never ended lasts until openEnd", []Run{
			run("b", "T1", "tick", 1, 1, 100, 0),
			run("b", "T1", "reschedule", 2, 2, 900, 950),
		}, Figures{Runs: 2, TickRuns: 1, Reschedules: 1, Overlaps: 1}},
		{"… and not after it", []Run{
			run("b", "T1", "tick", 1, 1, 100, 0),
			run("b", "T2", "tick", 2, 2, 1000, 1100),
		}, Figures{Runs: 2, TickRuns: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := Check(c.runs, func(Run) int64 { return 1000 })
			for _, fig := range []struct {
				name      string
				got, want int
			}{
				{"runs", f.Runs, c.want.Runs}, {"tick runs", f.TickRuns, c.want.TickRuns},
				{"reschedules", f.Reschedules, c.want.Reschedules}, {"overlaps", f.Overlaps, c.want.Overlaps},
				{"duplicate tick runs", f.DuplicateTickRuns, c.want.DuplicateTickRuns},
				{"fence violations", f.FenceViolations, c.want.FenceViolations},
			} {
				if fig.got != fig.want {
					t.Errorf("%s: %d, want %d (examples %v)", fig.name, fig.got, fig.want, f.Examples)
				}
			}
		})
	}
}

// A record still being written (its line without the newline yet) is left
// for the next read, not a failure.
func TestReadRunsLeavesAPartialLastLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "runs.log")
	full := `{"event":"start","task":"t","entity":"a","pid":1,"at":100}` + "\n" + `{"event":"end","task":"t","entity":"a","pid":1,"at":200}` + "\n"
	if err := os.WriteFile(p, []byte(full+`{"event":"start","task":"t","entity":`), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := ReadRuns(t, p)
	if len(runs) != 1 || runs[0].End.At != 200 {
		t.Fatalf("runs %+v", runs)
	}
}
