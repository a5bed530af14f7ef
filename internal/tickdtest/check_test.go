package tickdtest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheckFindsViolations(t *testing.T) {
	rec := func(ev, entity, tick, reason string, fence int64, pid int, at int64) Record {
		return Record{Event: ev, Task: "t", Entity: entity, Tick: tick, Reason: reason, Fence: fence, Pid: pid, At: at}
	}
	runs := []Run{
		{rec("start", "a", "T1", "tick", 10, 1, 100), rec("end", "a", "T1", "tick", 10, 1, 200)},
		{rec("start", "a", "T1", "tick", 11, 2, 150), rec("end", "a", "T1", "tick", 11, 2, 300)}, // overlap + duplicate
		{rec("start", "a", "T2", "tick", 5, 3, 400), rec("end", "a", "T2", "tick", 5, 3, 500)},   // fence goes back
		{rec("start", "b", "T1", "tick", 1, 4, 100), Record{}},                                   // killed: open until 1000
		{rec("start", "b", "T1", "reschedule", 2, 5, 900), rec("end", "b", "T1", "reschedule", 2, 5, 950)},
		{rec("start", "c", "T1", "tick", 1, 6, 100), rec("end", "c", "T1", "tick", 1, 6, 200)},
		{rec("start", "c", "T2", "tick", 2, 7, 200), rec("end", "c", "T2", "tick", 2, 7, 300)}, // touching: no overlap
	}
	f := Check(runs, func(Run) int64 { return 1000 })
	if f.Overlaps != 2 || f.DuplicateTickRuns != 1 || f.FenceViolations != 1 || f.Runs != 7 || f.Reschedules != 1 {
		t.Fatalf("%s\n%v", f, f.Examples)
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
