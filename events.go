package tickd

import (
	"time"

	"github.com/tickd/tickd/internal/scheduler"
)

// EventKind says what an Event reports.
type EventKind string

// The events OnEvent hears.
const (
	EventTick       EventKind = "tick"        // a tick's fan-out on this replica ended
	EventRunStarted EventKind = "run_started" // a run's action is about to begin
	EventRunEnded   EventKind = "run_ended"   // a run ended, and its lease was released
)

// Event is something tickd did: what a test waits on instead of sleeping,
// or a program counts. Options.OnEvent hears it.
type Event struct {
	Kind    EventKind
	Replica string
	Task    string
	Entity  string    // a run's
	Tick    time.Time // the tick, or the run's tick (zero for a trigger's)
	Reason  string    // a run's: tick, trigger, reschedule, retry, queued, replaced
	Fence   int64     // a run's
	// Outcome is how a run ended (EventRunEnded): done, reschedule,
	// failed, timeout, lease_lost, canceled, unlocked,
	// replaced.
	Outcome string
	Err     error // EventRunEnded: the action's error, or the release's
	// Entities and Started are what a tick's fan-out on this replica read
	// and started (EventTick).
	Entities, Started int
}

// observer turns the scheduler's events into OnEvent's: those three kinds,
// and only them.
func observer(on func(Event)) func(scheduler.Event) {
	if on == nil {
		return nil
	}
	return func(e scheduler.Event) {
		ev := Event{Replica: e.Replica, Task: e.Task, Entity: e.Entity, Tick: e.Tick, Reason: string(e.Reason), Fence: e.Fence,
			Outcome: string(e.Outcome), Err: e.Err}
		switch e.Kind {
		case scheduler.EventTick:
			ev.Kind, ev.Entities, ev.Started = EventTick, e.Counts.Entities, e.Counts.Started
		case scheduler.EventRunStarted:
			ev.Kind = EventRunStarted
		case scheduler.EventRunEnded:
			ev.Kind = EventRunEnded
		default:
			return
		}
		on(ev)
	}
}
