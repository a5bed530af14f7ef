package scheduler

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/schedule"
	"github.com/tickd/tickd/tasks"
)

// A task with timezone_from ticks each entity in the zone its attribute
// names: its schedule, evaluated in that zone. The task's tick loop wakes
// at every instant at which the task's schedule ticks in one of the zones
// its entities are in (zoneSet, a Schedule), and the fan-out of instant T
// runs the entities whose zone ticks at T, and passes over the others
// (zoneFilter). So the fan-out is one pass per distinct instant: zones that
// share their offsets share their instants, and a daily schedule over the
// world's 400 zones is about 40 instants a day.
//
// The zones are learned from the source: the task's own (for the entities
// without the attribute) from the start, the others as fan-outs find them.
// A zone found by a fan-out wakes the tick loop, which plans its next
// instant anew.

// zoneSet is the zones a task's entities were found in, and the union of
// its schedule in each: a Schedule.
type zoneSet struct {
	base schedule.Schedule // the task's, in its own zone
	mu   sync.Mutex
	in   map[string]schedule.Schedule // by zone name; the task's own under ""
	// found is told (without waiting) when a zone is added.
	found chan struct{}
	// scanned: the source was read for its zones (scan), or the set was
	// handed on by a reload (set once the reading ended).
	scanned atomic.Bool
}

// maxZones bounds the zones of one task: the IANA database names about
// 600.
const maxZones = 1000

func newZoneSet(base schedule.Schedule) *zoneSet {
	return &zoneSet{base: base, in: map[string]schedule.Schedule{"": base}, found: make(chan struct{}, 1)}
}

// Next is the first instant after t at which the task ticks in one of its
// zones.
func (z *zoneSet) Next(t time.Time) time.Time {
	z.mu.Lock()
	defer z.mu.Unlock()
	var first time.Time
	for _, s := range z.in {
		if n := s.Next(t); !n.IsZero() && (first.IsZero() || n.Before(first)) {
			first = n
		}
	}
	return first
}

// add adds zone name, at loc, and returns the task's schedule in it; nil
// when the set is full.
func (z *zoneSet) add(name string, loc *time.Location) schedule.Schedule {
	z.mu.Lock()
	defer z.mu.Unlock()
	if s, ok := z.in[name]; ok {
		return s
	}
	if len(z.in) >= maxZones {
		return nil
	}
	s := schedule.In(z.base, loc)
	z.in[name] = s
	select {
	case z.found <- struct{}{}:
	default:
	}
	return s
}

// learn adds the zones prev found: a reload's set, for the schedule the
// reload gives.
func (z *zoneSet) learn(prev *zoneSet) {
	z.scanned.Store(prev.scanned.Load())
	for _, name := range prev.names() {
		if loc, ok := schedule.LoadZone(name); ok {
			z.add(name, loc)
		}
	}
}

// scan reads src for the zones its entities' attribute attr names, and adds
// them. A name that is no zone is left for the fan-outs to count.
func (z *zoneSet) scan(ctx context.Context, src tasks.Source, attr string) error {
	defer z.scanned.Store(true) // a backfill waits for it: its ticks are the zones' (backfillTicks)
	seen := map[string]bool{}
	return tasks.EachEntity(ctx, src, func(e tasks.Entity) error {
		if name := e.Attributes[attr]; name != "" && !seen[name] {
			seen[name] = true
			if loc, ok := schedule.LoadZone(name); ok {
				z.add(name, loc)
			}
		}
		return nil
	})
}

// each yields each zone's name ("" the task's own) and the schedule in it.
func (z *zoneSet) each() map[string]schedule.Schedule {
	z.mu.Lock()
	defer z.mu.Unlock()
	return maps.Clone(z.in)
}

// names are the zones found, sorted, the task's own left out.
func (z *zoneSet) names() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	out := make([]string, 0, len(z.in))
	for n := range z.in {
		if n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// zoneFilter says, in the fan-out of instant T, whether an entity in a
// zone ticks at T: each zone's answer worked out once per fan-out.
type zoneFilter struct {
	set  *zoneSet
	T    time.Time
	only map[string]bool // when not nil: the zones that run (a catch-up's)
	seen map[string]zoneAt
	// floors are, by zone that ticks at T, the tick at or after which an
	// entity's run counts as its run of T (floorAt).
	floors map[string]time.Time
	// Served are the zones whose entities tick at T, the task's own as
	// "" (for history: which zones a tick served).
	Served []string
}

// zoneAt is a zone's answer at T.
type zoneAt int

const (
	zoneNotNow  zoneAt = iota // the zone ticks at another instant
	zoneNow                   // its entities tick at T
	zoneUnknown               // no such zone (or too many): its entities cannot be placed
)

func newZoneFilter(set *zoneSet, T time.Time, only map[string]bool) *zoneFilter {
	return &zoneFilter{set: set, T: T, only: only, seen: map[string]zoneAt{}, floors: map[string]time.Time{}}
}

// at says what the entities of zone name do at T.
func (f *zoneFilter) at(name string) zoneAt {
	if a, ok := f.seen[name]; ok {
		return a
	}
	a := zoneUnknown
	s := f.set.base
	if name != "" {
		s = nil
		if loc, ok := schedule.LoadZone(name); ok {
			s = f.set.add(name, loc)
		}
	}
	if s != nil {
		a = zoneNotNow
		if s.Next(f.T.Add(-time.Nanosecond)).Equal(f.T) && (f.only == nil || f.only[name]) {
			a = zoneNow
			f.Served = append(f.Served, name)
			f.floors[name] = floorAt(s, f.T)
		}
	}
	f.seen[name] = a
	return a
}

// served are the zones whose entities tick at T, by name (the task's own,
// "", as own), sorted, once each.
func (f *zoneFilter) served(own string) []string {
	zs := slices.Clone(f.Served)
	for i, z := range zs {
		if z == "" {
			zs[i] = own
		}
	}
	slices.Sort(zs)
	return slices.Compact(zs)
}

// floor is the Floor of the run at T of an entity in zone name, which
// ticks at T (at).
func (f *zoneFilter) floor(name string) time.Time { return f.floors[name] }

// floorAt is the tick at or after which an entity whose schedule s ticks at
// T counts as having had its run of T (driver.Request.Floor): its runs are
// never closer than its own schedule's, whatever zone it was in before.
// For a schedule that ticks at most once a local day (its tick before T is
// 23 hours or more before it, or none is within 32 days), the start of
// T's local date: an entity that moved west, whose 09:00 comes later, runs
// no second time on the same local date, and one that moved east runs at
// its new zone's first 09:00 of a date it has not run on. For a schedule
// that ticks more often, half way from its tick before T: a run in the old
// zone within half a period before T counts as T's.
func floorAt(s schedule.Schedule, T time.Time) time.Time {
	var prev time.Time
	for _, within := range []time.Duration{26 * time.Hour, 8 * 24 * time.Hour, 32 * 24 * time.Hour} {
		if prev = schedule.Prev(s, T.Add(-time.Nanosecond), within); !prev.IsZero() {
			break
		}
	}
	if prev.IsZero() || T.Sub(prev) >= 23*time.Hour {
		l := T.In(schedule.Location(s))
		return time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, l.Location())
	}
	return T.Add(-T.Sub(prev) / 2)
}
