package scheduler

import (
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// What a fan-out keeps of the entities it reads: their attributes, for
// their runs, and, for a task with timezone_from, whether each ticks at
// the fan-out's instant.

// each reads the task's source, calling add with each entity's id and
// keeping its attributes, if it has any, for its run (attrsOf): only an
// EntitySource yields any, and its fan-out has f.attrs.
//
// A fan-out of zones (timezone_from) keeps its instant's entities, up to
// zoneBurst, until the source is read, then sends them: its batches go
// out in one burst, not one every few hundred lines of a source whose
// zones interleave (Redis spent a quarter more a run on those, cold
// between them: docs/performance.md). Past zoneBurst it sends as it
// reads, the kept ones first.
func (f *fanOut) each(add func(id string) error) error {
	var kept []string
	streaming := f.zones == nil
	err := tasks.EachEntity(f.ctx, f.ts.source, func(e tasks.Entity) error {
		if f.zones != nil && !f.zoned(e) || len(f.only) > 0 && !f.only[e.ID] {
			return nil
		}
		if e.Attributes != nil {
			f.attrs[e.ID] = e.Attributes
		}
		switch {
		case streaming:
			return add(e.ID)
		case len(kept) < zoneBurst:
			kept = append(kept, e.ID)
			return nil
		}
		streaming = true // the burst is full: send it, then as read
		for _, id := range kept {
			if err := add(id); err != nil {
				return err
			}
		}
		kept = nil
		return add(e.ID)
	})
	for _, id := range kept {
		if aerr := add(id); aerr != nil && err == nil {
			err = aerr
		}
	}
	return err
}

// zoneBurst bounds the entities a fan-out of zones keeps before it sends
// them (each): an instant of a daily schedule over the world's zones has
// a fortieth of the entities.
const zoneBurst = 65536

// zoned says whether e ticks at f.T in its zone (timezone_from). One whose
// zone is unknown is counted, at the instants of the task's own zone, as
// skipped.
func (f *fanOut) zoned(e tasks.Entity) bool {
	switch f.zones.at(e.Attributes[f.ts.t.TimezoneFrom]) {
	case zoneNow:
		return true
	case zoneUnknown:
		if f.zones.at("") == zoneNow {
			f.n.Entities++
			if f.n.UnknownZone++; f.n.UnknownZone == 1 {
				f.s.log.Warn("entity's zone is unknown: its runs are skipped", logs.KeyTask, f.ts.t.Name, logs.KeyEntity, e.ID,
					"zone", e.Attributes[f.ts.t.TimezoneFrom], logs.Tick(f.T))
			}
		}
	}
	return false
}

// attrsOf takes id's attributes, to start its run with, or nil.
func (f *fanOut) attrsOf(id string) tasks.Attributes {
	if len(f.attrs) == 0 {
		return nil
	}
	a := f.attrs[id]
	delete(f.attrs, id)
	return a
}

// requests are the batch's lease requests (in f.reqs, reused).
func (f *fanOut) requests() []driver.Request {
	t := &f.ts.t
	reqs := f.reqs[:0]
	var place linePlace
	if len(t.Limits) > 0 {
		place = placeOf(f.s.Config(), t)
	}
	record := recordFor(t, f.reason)
	live := f.reason == driver.ReasonTick // a catch-up's run skips a busy entity
	for _, id := range f.batch {
		reqs = append(reqs, driver.Request{Task: t.Name, Entity: id, TTL: t.LeaseTTL, Reason: f.reason, Tick: f.T, Record: record, RecordOf: f.recordOf,
			Queue: live && t.OnBusy == config.OnBusyQueue, QueueMax: t.QueueMax, QueueAge: t.CatchUp,
			Replace: live && t.OnBusy == config.OnBusyReplace, Limits: t.Limits})
		if f.zones != nil {
			reqs[len(reqs)-1].Floor = f.zones.floor(f.attrs[id][t.TimezoneFrom])
		}
		if len(t.Limits) > 0 {
			place.place(&reqs[len(reqs)-1], f.attrs[id])
		}
	}
	f.reqs = reqs
	return reqs
}
