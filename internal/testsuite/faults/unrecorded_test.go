package faults

import (
	"strings"
	"time"

	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// unrecordedReason marks, among the runs the liveness judge reads, a run its
// replica logged whose worker left no record: it held its lease, so its
// entity was busy, but it is no tick's run (tickOf).
const unrecordedReason = "unrecorded"

// unrecorded are the runs the replicas logged ("run ended") whose worker
// left no record, as the judge needs them: holds, each its lease from its
// grant (its fence: Redis's clock, µs) to its release (the line's time),
// for the judge's busy (a run stopped for safety perhaps left its lease
// held: until a TTL later); and stopped, by task/entity@T, the tick runs (or
// hand-overs carrying T) stopped for safety, outcome lease_lost, once
// started. On a machine loaded enough that a worker's exec takes longer
// than a lease's trust window, a run is granted, its worker exec'd,
// and stopped and SIGKILLed before the worker's first write: tickd ran the
// pair, and stopped it as the guarantee says, and the worker's records
// cannot show it. CI had 21 such pairs judged missed in TestOperatorChaos's
// Cluster scenario (liveness 0.979). A run stopped before it began ("run
// not started") is handed over, and its hand-over is what runs T: it is a
// hold only.
func unrecorded(runs []tickdtest.Run, replicaLogs []string, ttl time.Duration) (holds []tickdtest.Run, stopped map[string]bool) {
	recorded := map[tickdtest.RunID]bool{}
	for _, r := range runs {
		recorded[r.ID()] = true
	}
	stopped = map[string]bool{}
	for rec := range tickdtest.LogLines(replicaLogs, logs.MsgRunEnded) {
		id := tickdtest.RunID{Task: rec.Task, Entity: rec.Entity, Fence: rec.Fence}
		if recorded[id] || rec.Fence == 0 {
			continue
		}
		end, lost := rec.Time.UnixNano(), rec.Outcome == string(driver.OutcomeLeaseLost)
		if lost {
			end += ttl.Nanoseconds()
		}
		r := tickdtest.Run{
			Start: tickdtest.Record{Event: "start", Task: rec.Task, Entity: rec.Entity, Tick: rec.Tick, Reason: rec.Reason,
				Fence: rec.Fence, At: rec.Fence * int64(time.Microsecond)},
			End: tickdtest.Record{Event: "end", Task: rec.Task, Entity: rec.Entity, Fence: rec.Fence, At: end},
		}
		if T, ok := tickOf(r); ok && lost && !strings.Contains(rec.Error, tasks.ErrNotStarted.Error()) {
			stopped[rec.Task+"/"+rec.Entity+"@"+T.UTC().Format(time.RFC3339)] = true
		}
		r.Start.Reason = unrecordedReason
		holds = append(holds, r)
	}
	return holds, stopped
}
