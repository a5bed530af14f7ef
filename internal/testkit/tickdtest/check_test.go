package tickdtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/logs"
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

// TestOpenEndByLog: a run with no end record ends where its replica's log
// bounds it (the SIGKILL, else its start plus the duration "run ended"
// gives), found by task, entity and fence in either replica's log, and
// otherwise runs until the check. CI's TestImage judged 13 overlaps of a
// worker SIGKILLed when its replica stalled past its lease, bounded by the
// check's time alone.
func TestOpenEndByLog(t *testing.T) {
	const s = int64(time.Second)
	at := func(sec int64) string { return time.Unix(sec, 0).UTC().Format(time.RFC3339Nano) }
	replicaA := `{"time":"` + at(11) + `","level":"WARN","msg":"` + logs.MsgKilled + `","task":"t","entity":"e5","fence":7}
{"time":"` + at(12) + `","level":"WARN","msg":"` + logs.MsgRunEnded + `","task":"t","entity":"e5","fence":7,"duration":"10s"}
{"time":"` + at(40) + `","level":"INFO","msg":"` + logs.MsgKilled + `","task":"other","entity":"e6","fence":8}`
	replicaB := `{"time":"` + at(30) + `","level":"WARN","msg":"` + logs.MsgRunEnded + `","task":"t","entity":"e6","fence":8,"duration":"2s"}
not a JSON line, ` + logs.MsgKilled
	runs := []Run{
		run("e5", "T1", "tick", 7, 1, 1*s, 0),     // SIGKILLed at 11s: ended by then
		run("e5", "T2", "tick", 9, 2, 21*s, 22*s), // after the kill
		run("e6", "T1", "tick", 8, 3, 1*s, 0),     // ended within 2s (+1ms of rounding) of its start
		run("e6", "T2", "tick", 10, 4, 4*s, 5*s),
		run("e7", "T1", "tick", 11, 5, 1*s, 0), // nothing logged: open until the check
		run("e7", "T2", "tick", 12, 6, 50*s, 51*s),
	}
	ends := LoggedEnds([]string{replicaA, replicaB})
	if got := ends[RunID{"t", "e5", 7}].Bound(runs[0]); got != 11*s {
		t.Errorf("e5's run bounded at %v, want the kill at 11s", time.Duration(got))
	}
	if got := ends[RunID{"t", "e6", 8}].Bound(runs[2]); got != 3*s+int64(time.Millisecond) {
		t.Errorf("e6's run bounded at %v, want 3.001s", time.Duration(got))
	}
	f := Check(runs, OpenEndByLog(ends, time.Unix(60, 0)))
	if f.Overlaps != 1 || len(f.Examples) != 1 || !strings.Contains(f.Examples[0], "e7") {
		t.Errorf("bounded by the logs: %v %q, want e7's one overlap", f, f.Examples)
	}
	if f := Check(runs, OpenEndByLog(nil, time.Unix(60, 0))); f.Overlaps != 3 {
		t.Errorf("bounded by the check alone: %d overlaps, want 3", f.Overlaps)
	}
}
