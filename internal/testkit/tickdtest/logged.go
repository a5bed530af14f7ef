package tickdtest

import (
	"encoding/json"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/tickd/tickd/internal/logs"
)

// LogLine is what a checker reads of a replica's JSON log line.
type LogLine struct {
	Time     time.Time `json:"time"`
	Msg      string    `json:"msg"`
	Task     string    `json:"task"`
	Entity   string    `json:"entity"`
	Tick     string    `json:"tick"` // "" for a run of no tick (a trigger): a time.Time would refuse the line
	Fence    int64     `json:"fence"`
	Reason   string    `json:"reason"`
	Outcome  string    `json:"outcome"`
	Error    string    `json:"error"`
	Duration string    `json:"duration"`
	// SupersededBy is, on a logs.MsgAlreadyRan line, the tick of the run
	// that took the entity's one waiting place from the tick's run.
	SupersededBy string `json:"superseded_by"`
}

// LogLines yields the lines of logs (each a replica's whole JSON log) whose
// message is one of msgs.
func LogLines(logs []string, msgs ...string) iter.Seq[LogLine] {
	return func(yield func(LogLine) bool) {
		for _, log := range logs {
			for line := range strings.SplitSeq(log, "\n") {
				var rec LogLine
				if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(line, m) }) ||
					json.Unmarshal([]byte(line), &rec) != nil || !slices.Contains(msgs, rec.Msg) {
					continue
				}
				if !yield(rec) {
					return
				}
			}
		}
	}
}

// RunID names one run across replicas: its task, entity and fence (a
// fence is granted once per entity).
type RunID struct {
	Task, Entity string
	Fence        int64
}

// ID is r's RunID.
func (r Run) ID() RunID { return RunID{r.Start.Task, r.Start.Entity, r.Start.Fence} }

// LoggedEnd bounds the end of a run whose worker left no end record: on a
// loaded machine, a worker told to stop may not write it within its grace,
// and is SIGKILLed. Its replica logs the kill (logs.MsgKilled, at the
// moment it is sent) and the run's end ("run ended", with how long the run
// took from before the worker was started until it was reaped: its start
// plus that bounds its end, late by the exec time). The "run ended" line's
// own time is no bound: a stalled link delays the release before it.
type LoggedEnd struct {
	Killed int64         // when SIGKILL was sent (unix ns); 0: not logged
	Took   time.Duration // 0: not logged
	// Released is the time of the replica's "run ended" line (unix ns; 0:
	// not logged). The line is written once the lease is released, but its
	// time is the run's end: a release that landed seconds later (a loaded
	// replica) is not seen in it.
	Released int64
}

// Bound is the latest r can have ended by what its replica logged; 0 when
// it logged nothing of it.
func (e LoggedEnd) Bound(r Run) int64 {
	switch {
	case e.Killed != 0:
		return e.Killed
	case e.Took != 0:
		return r.Start.At + e.Took.Nanoseconds()
	}
	return 0
}

// LoggedEnds reads replicas' logs for what bounds their runs' ends.
func LoggedEnds(replicaLogs []string) map[RunID]LoggedEnd {
	ends := map[RunID]LoggedEnd{}
	for rec := range LogLines(replicaLogs, logs.MsgRunEnded, logs.MsgKilled) {
		id := RunID{rec.Task, rec.Entity, rec.Fence}
		e := ends[id]
		switch rec.Msg {
		case logs.MsgKilled:
			e.Killed = rec.Time.UnixNano()
		case logs.MsgRunEnded:
			if d, err := time.ParseDuration(rec.Duration); err == nil {
				e.Took = d + time.Millisecond // logged rounded to the ms
			}
			e.Released = rec.Time.UnixNano()
		}
		ends[id] = e
	}
	return ends
}

// OpenEndByLog is Check's openEnd for replicas that may SIGKILL a run: a
// run with no end record ended where its replica's log bounds it
// (ends, from LoggedEnds), else it is taken to run until end. Bounded by
// the check's time alone, a worker SIGKILLed right after its start record,
// on a loaded machine, overlapped every later run of its entity.
func OpenEndByLog(ends map[RunID]LoggedEnd, end time.Time) func(Run) int64 {
	return func(r Run) int64 {
		if at := ends[r.ID()].Bound(r); at != 0 {
			return at
		}
		return end.UnixNano()
	}
}

// Logs is the logs of procs, for LogLines and LoggedEnds.
func Logs(procs ...*Proc) []string {
	logs := make([]string, len(procs))
	for i, p := range procs {
		logs[i] = p.Log()
	}
	return logs
}
