package report

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
	"github.com/tickd/tickd/tasks"
)

// EntityStatus is one entity of a task, as tickd status TASK ENTITY and
// the console's entity page show it: what the store holds of it, and
// what its source says of it now.
type EntityStatus struct {
	Task  *config.Task
	ID    string
	State driver.EntityState
	Found // its attributes, from the source
	// Location is the zone its ticks are in: its own (timezone_from), else
	// the task's; nil for a zone that is no zone, which BadZone names.
	Location *time.Location
	BadZone  string
	NextTick time.Time // zero when its zone is unknown
}

// Found is what a task's source says of one entity: whether it lists it,
// and its attributes; Err says why the source was not read, if it was not.
type Found struct {
	Listed     bool
	Attributes tasks.Attributes
	Err        error
}

// ErrCommandNotRun is Found.Err for a task whose entities come from a
// command that the reader does not run (the console: a viewer must not
// make the daemon run commands).
var ErrCommandNotRun = errors.New("the entities come from entities_command, which the console does not run: tickd status TASK ENTITY or tickd check -entity ID reads it")

// LookupEntity reads t's source until it finds id, within t's
// entities_timeout (a minute by default); an entities_command is run only
// when runCommand says so.
func LookupEntity(ctx context.Context, t *config.Task, id string, runCommand bool) Found {
	if t.EntitiesCommand != nil && !runCommand {
		return Found{Err: ErrCommandNotRun}
	}
	ctx, cancel := context.WithTimeout(ctx, max(t.EntitiesTimeout, time.Second))
	defer cancel()
	var f Found
	errFound := errors.New("found")
	err := tasks.EachEntity(ctx, t.Source(nil), func(e tasks.Entity) error {
		if e.ID != id {
			return nil
		}
		f.Listed, f.Attributes = true, maps.Clone(e.Attributes)
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		f.Err = err
	}
	return f
}

// EntityLocation is the zone an entity of t with attrs ticks in: its own
// (timezone_from), else t's; nil and the name for one that is no zone.
func EntityLocation(t *config.Task, attrs tasks.Attributes) (*time.Location, string) {
	if z := attrs[t.TimezoneFrom]; t.TimezoneFrom != "" && z != "" {
		loc, ok := schedule.LoadZone(z)
		if !ok {
			return nil, z
		}
		return loc, ""
	}
	return t.Location, ""
}

// ReadEntity reads entity id of t: its lease, last run and pending run
// from store, its attributes from t's source (f, when the caller has read
// it), its zone and next tick after now.
func ReadEntity(ctx context.Context, store *lease.Store, t *config.Task, id string, f Found, now time.Time) (EntityStatus, error) {
	st, err := store.Fleet().Entity(ctx, t.Name, id)
	if err != nil {
		return EntityStatus{}, fmt.Errorf("read entity %q of %s: %w", id, t.Name, err)
	}
	es := EntityStatus{Task: t, ID: id, State: st, Found: f}
	es.Location, es.BadZone = EntityLocation(t, f.Attributes)
	if es.Location != nil {
		es.NextTick = schedule.In(t.Schedule, es.Location).Next(now)
	}
	return es, nil
}

// Doc is es's -json document.
func (es EntityStatus) Doc(now time.Time) EntityDoc {
	d := EntityDoc{Task: es.Task.Name, Entity: es.ID, Source: DescribeSource(*es.Task), Listed: es.Listed,
		Attributes: map[string]string{}, NextTick: Instant(es.NextTick),
		Leases: []LeaseDoc{}, LastRuns: []RunDoc{}, Due: []DueDoc{}}
	maps.Copy(d.Attributes, es.Attributes)
	if es.Err != nil {
		d.SourceError = es.Err.Error()
	}
	if es.Location != nil {
		d.Timezone = es.Location.String()
	}
	if h := es.State.Held; h != nil {
		d.Leases = append(d.Leases, leaseDoc(*h, now))
	}
	if r := es.State.Last; r != nil {
		d.LastRuns = append(d.LastRuns, runDoc(*r))
	}
	if p := es.State.Pending; p != nil {
		d.Due = append(d.Due, dueDoc(*p))
	}
	return d
}
