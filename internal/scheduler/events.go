package scheduler

import (
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// EventKind says what an Event reports.
type EventKind int

// The events a Scheduler reports to Options.Observer.
const (
	// EventTick: a tick's fan-out ended; Counts says what it did.
	EventTick EventKind = iota + 1
	// EventRunStarted: a run's action is about to begin.
	EventRunStarted
	// EventRunEnded: a run ended and its lease was released (or the
	// release failed: Err); Outcome says how it ended.
	EventRunEnded
	// EventRescheduleLimit: a run asked to be rescheduled once more than
	// max_reschedules allows; the entity waits for the next tick.
	EventRescheduleLimit
	// EventStoreError: the lease store failed (Err); what failed is
	// retried.
	EventStoreError
	// EventDueDeferred: a due run for a task this replica does not know
	// was left for a replica that does (a config rollout).
	EventDueDeferred
	// EventDueDropped: a due run for a task no replica knows was dropped.
	EventDueDropped
	// EventDuplicateReplica: another process announces this replica's id
	// (Err: a *driver.DuplicateReplicaError); logged at warn first.
	EventDuplicateReplica
)

var eventNames = map[EventKind]string{
	EventTick: "tick", EventRunStarted: "run_started", EventRunEnded: "run_ended",
	EventRescheduleLimit: "reschedule_limit", EventStoreError: "store_error",
	EventDueDeferred: "due_deferred", EventDueDropped: "due_dropped",
	EventDuplicateReplica: "duplicate_replica",
}

func (k EventKind) String() string { return eventNames[k] }

// Event is something a Scheduler did. Tests wait on events instead of
// reading logs (logs are for people and may change); an embedding program
// may count them.
type Event struct {
	Kind    EventKind
	Replica string
	Task    string
	Entity  string        // run events
	Tick    time.Time     // the tick, or the run's tick
	Reason  driver.Reason // run events
	Fence   int64         // run events
	Outcome driver.Outcome
	Err     error      // EventRunEnded: the action's error, if any; EventStoreError
	Counts  TickCounts // EventTick
}

// observe hands e to Options.Observer, if set.
func (s *Scheduler) observe(e Event) {
	if s.observer != nil {
		e.Replica = s.replica
		s.observer(e)
	}
}
