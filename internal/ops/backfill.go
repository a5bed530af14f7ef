package ops

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
	"github.com/tickd/tickd/tasks"
)

// MaxBackfillTicks bounds the ticks of one backfill's range.
const MaxBackfillTicks = 100_000

// BackfillPlan is what a backfill of a range would run, as the run record
// says now.
type BackfillPlan struct {
	// Backfill is the backfill as it would be created: its id, range,
	// entities, and the ticks it leaves out (Unknown).
	Backfill driver.Backfill
	Ticks    int   // the range's ticks, Unknown ones included
	Entities int   // the entities it runs each tick for
	Runs     int64 // the runs it would start: the (entity, tick)s no one ran, or every one (BackfillAll)
}

// PlanBackfill plans the backfill ask of t's ticks (from ask.From to
// ask.To, both included, of ask.Entities, nil for every entity of t, the
// runs ask.Only says), asked for by ask.By at now: which ticks are known
// (their run record is kept, or no replica fanned them out:
// driver.TickRan) and how many runs it would start. A tick a replica
// fanned out while no run record was kept (by its fan mark, or by its
// record in the history: a tickd before fan marks left only that), one
// older than driver.FannedKept or than the history keeps without one, and
// one before a reshard or a data loss are left out (Unknown): their runs
// are not known, and none may run twice. A backfill of every run again
// (driver.BackfillAll) runs every entity of each tick, once, but for a
// tick before a reshard or a data loss (its own record numbers the
// entities as the tick's does).
func PlanBackfill(ctx context.Context, store *lease.Store, t config.Task, ask driver.Backfill, now time.Time) (BackfillPlan, error) {
	from, to, ids := ask.From, ask.To, ask.Entities
	switch {
	case to.Before(from):
		return BackfillPlan{}, fmt.Errorf("-to %s is before -from %s", to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
	case to.After(now.Add(-t.LateLimit())):
		return BackfillPlan{}, fmt.Errorf("-to %s is a tick a replica may still run (within %s of now): give an older one",
			to.UTC().Format(time.RFC3339), t.LateLimit())
	}
	all, err := TriggerIDs(ctx, t, ids, false)
	if err != nil {
		return BackfillPlan{}, err
	}
	ticks, who, err := rangeTicks(ctx, t, from, to, all)
	if err != nil {
		return BackfillPlan{}, err
	}
	if len(ticks) == 0 {
		return BackfillPlan{}, fmt.Errorf("task %s has no tick from %s to %s", t.Name, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	bf := driver.Backfill{ID: newBackfillID(), Task: t.Name, From: ticks[0], To: ticks[len(ticks)-1], Entities: slices.Clone(ids), Total: len(ticks), Only: ask.Only, By: ask.By, Created: now}
	plan := BackfillPlan{Ticks: len(ticks), Entities: len(all)}
	oldest := now.Add(-driver.FannedKept) // older: no fan mark tells whether it was fanned out
	// A tickd before fan marks fanned its ticks out without them, but with
	// a tick record: the history counts too.
	fanned, reach, err := fannedOut(ctx, store, t)
	if err != nil {
		return BackfillPlan{}, err
	}
	oldest = later(oldest, reach)
	for i := 0; i < len(ticks); {
		// Ticks of one set of entities (every tick's, but with zones), read
		// 1,000 at a time.
		j := i + 1
		for j < len(ticks) && j-i < 1000 && sameSlice(who[j], who[i]) {
			j++
		}
		part, ids := ticks[i:j], who[i]
		i = j
		rec, err := store.Fleet().RunRecords().Read(ctx, t.Name, part, ids)
		if err != nil {
			return BackfillPlan{}, err
		}
		for j, r := range rec {
			if runs, known := tickRuns(ask.Only, r, fanned[part[j].UnixNano()] || part[j].Before(oldest), len(ids)); known {
				plan.Runs += runs
			} else {
				bf.Unknown = append(bf.Unknown, part[j])
			}
		}
	}
	plan.Backfill = bf
	return plan, nil
}

// tickRuns are the runs a backfill of only (driver.Backfill.Only) would
// start of a tick whose run record is r, and whether they are known: a
// tick forgotten (a reshard or a data loss since) is not; of every run
// again, all its entities (n) run; of the failed runs, those its record
// says failed, when it is kept. Of the missing runs: one whose record is
// kept, by its entities' bits; one without, when it was fanned out
// (unsure: fanned out by the history, or too old to tell), is not; else no
// one ran it, and all its entities run.
func tickRuns(only string, r driver.TickRan, unsure bool, n int) (runs int64, known bool) {
	switch {
	case r.Forgotten:
		return 0, false
	case only == driver.BackfillAll:
		return int64(n), true
	case only == driver.BackfillFailed:
		for _, f := range r.Failed {
			if f {
				runs++
			}
		}
		return runs, r.Kept
	case r.Kept:
		for _, ran := range r.Ran {
			if !ran {
				runs++
			}
		}
		return runs, true
	case r.Fanned || unsure:
		return 0, false
	}
	return int64(n), true
}

// fannedOut are the ticks of t whose records the history keeps (a replica
// fanned them out), by Unix ns, and the oldest tick it keeps when it keeps
// no more (zero while it is not full: it has every tick).
func fannedOut(ctx context.Context, store *lease.Store, t config.Task) (map[int64]bool, time.Time, error) {
	recs, err := store.Fleet().Ticks(ctx, t.Name, t.HistoryTicks)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read which ticks ran: %w", err)
	}
	fanned := make(map[int64]bool, len(recs))
	for _, r := range recs {
		fanned[r.Tick.UnixNano()] = true
	}
	var reach time.Time
	if len(recs) > 0 && len(recs) == t.HistoryTicks {
		reach = recs[len(recs)-1].Tick
	}
	return fanned, reach, nil
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// newBackfillID is a new backfill's id: a request id's first 8 random
// hex digits, short enough to type after -cancel.
func newBackfillID() string { return lease.NewRequestID()[:8] }

// StartBackfill creates plan's backfill: a replica that runs its task
// takes it within a second.
func StartBackfill(ctx context.Context, store *lease.Store, t *config.Task, plan BackfillPlan) (Done, error) {
	bf := plan.Backfill
	if _, err := store.Fleet().SaveBackfill(ctx, bf, 0); err != nil {
		return Done{}, err
	}
	what := map[string]string{driver.BackfillMissing: "the runs no one ran", driver.BackfillAll: "every run again (-only all)",
		driver.BackfillFailed: "the runs that failed (-only failed)"}[bf.Only]
	said := fmt.Sprintf("backfill %s of %s, %s: %d ticks from %s to %s, %d runs to start", bf.ID, t.Name, what, plan.Ticks,
		bf.From.UTC().Format(time.RFC3339), bf.To.UTC().Format(time.RFC3339), plan.Runs)
	if len(bf.Unknown) > 0 {
		said += fmt.Sprintf("; %d ticks left out, whose runs are not known (a replica ran them while the task kept no run_record)", len(bf.Unknown))
	}
	a := driver.Action{Task: t.Name, At: bf.Created, By: bf.By, What: driver.ActionBackfill, Detail: said}
	return record(ctx, store, t, a, said), nil
}

// ErrNoBackfill is CancelBackfill's error for an id no backfill has.
var ErrNoBackfill = errors.New("no such backfill")

// CancelBackfill cancels backfill id: its replica stops it within
// backfill's hold (the runs started go on).
func CancelBackfill(ctx context.Context, store *lease.Store, cfg *config.Config, id, by string) (Done, error) {
	bs, err := store.Fleet().Backfills(ctx)
	if err != nil {
		return Done{}, err
	}
	i := slices.IndexFunc(bs, func(b driver.Backfill) bool { return b.ID == id })
	if i < 0 {
		return Done{}, fmt.Errorf("%w: %q", ErrNoBackfill, id)
	}
	if ok, err := store.Fleet().CancelBackfill(ctx, id, by); err != nil || !ok {
		return Done{}, errors.Join(err, fmt.Errorf("%w: %q", ErrNoBackfill, id))
	}
	said := fmt.Sprintf("backfill %s of %s cancelled: no run starts after its next tick's fan-out ends, within 5s; the runs started go on", id, bs[i].Task)
	t, _ := cfg.Task(bs[i].Task)
	a := driver.Action{Task: bs[i].Task, At: time.Now(), By: by, What: driver.ActionBackfill, Detail: said}
	return record(ctx, store, t, a, said), nil
}

// GroupIDs are t's entities of group g (tickd backfill -group): those
// whose attribute its fair limit groups by (fair_by, by cfg) is g; of ids
// alone when ids are given.
func GroupIDs(ctx context.Context, cfg *config.Config, t config.Task, g string, ids []string) ([]string, error) {
	l, ok := cfg.Fair(&t)
	if !ok {
		return nil, fmt.Errorf("task %s is under no fair limit: a group is the value of a fair limit's fair_by attribute", t.Name)
	}
	var out []string
	err := tasks.EachEntity(ctx, t.Source(nil), func(e tasks.Entity) error {
		if e.Attributes[l.FairBy] == g && (len(ids) == 0 || slices.Contains(ids, e.ID)) {
			out = append(out, e.ID)
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case len(out) == 0:
		return nil, fmt.Errorf("task %s has no entity of group %q (its attribute %s)", t.Name, g, l.FairBy)
	}
	return out, nil
}

// rangeTicks are t's ticks from from to to, and by tick the entities of
// ids that tick then: every one at each tick of its schedule; with
// timezone_from, each at its zone's ticks (the task's own zone for an
// entity that names none; none for one whose zone is no zone: a tick
// passes it over). At most MaxBackfillTicks.
func rangeTicks(ctx context.Context, t config.Task, from, to time.Time, ids []string) ([]time.Time, [][]string, error) {
	inRange := func(s schedule.Schedule, fn func(time.Time)) {
		for at := s.Next(from.Add(-time.Nanosecond)); !at.IsZero() && !at.After(to); at = s.Next(at) {
			fn(at)
		}
	}
	tooMany := fmt.Errorf("the range has more than %d ticks: backfill it in parts", MaxBackfillTicks)
	if t.TimezoneFrom == "" {
		var ticks []time.Time
		inRange(t.Schedule, func(at time.Time) { ticks = append(ticks, at) })
		if len(ticks) > MaxBackfillTicks {
			return nil, nil, tooMany
		}
		who := make([][]string, len(ticks))
		for i := range who {
			who[i] = ids
		}
		return ticks, who, nil
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	byZone := map[string][]string{}
	err := tasks.EachEntity(ctx, t.Source(nil), func(e tasks.Entity) error {
		z := e.Attributes[t.TimezoneFrom]
		if _, known := schedule.LoadZone(z); want[e.ID] && (z == "" || known) {
			byZone[z] = append(byZone[z], e.ID)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	at := map[int64][]string{} // by instant (Unix ns): one instant in several zones
	for z, zids := range byZone {
		s := t.Schedule
		if loc, ok := schedule.LoadZone(z); ok && z != "" {
			s = schedule.In(t.Schedule, loc)
		}
		inRange(s, func(T time.Time) { at[T.UnixNano()] = append(at[T.UnixNano()], zids...) })
		if len(at) > MaxBackfillTicks {
			return nil, nil, tooMany
		}
	}
	ns := slices.Sorted(maps.Keys(at))
	ticks, who := make([]time.Time, len(ns)), make([][]string, len(ns))
	for i, n := range ns {
		ticks[i], who[i] = time.Unix(0, n).UTC(), at[n]
	}
	return ticks, who, nil
}

// sameSlice says whether a and b are one slice (rangeTicks's every tick's).
func sameSlice(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
