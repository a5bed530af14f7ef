// Package history reads what a task's ticks left in the store (tick
// records, actions, pauses, the replicas that run it) and assesses it: the
// ticks newest first, the missed and paused ones among them, and the
// task's health flags (not firing, failing, starved). The console, the
// command line and the scheduler's metrics all judge a task here.
//
// The records themselves are written by package scheduler, through the
// lease store.
package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/registry"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
)

// The states of a tick in the history.
const (
	TickComplete   = "complete"   // every run it started has ended, and none waits for a limit
	TickRunning    = "running"    // runs go on, on replicas that are up
	TickWaiting    = "waiting"    // every run it started has ended; some wait for a limit still
	TickIncomplete = "incomplete" // a replica's part was left unfinished: the replica is gone
	TickMissed     = "missed"     // the schedule expected it; no replica fanned it out
	TickPaused     = "paused"     // the ticks of one pause, folded into one row: Pause says whose
)

// TickView is one tick of a task's history, with its state; a missed tick
// has no parts. A paused row stands for the ticks one pause held back: its
// Tick is the first of them, Pause the action that paused.
type TickView struct {
	driver.TickRecord
	State string
	Pause *driver.Action
}

// Health says whether a task has stopped firing, fails, or runs nothing.
type Health struct {
	// NotFiring says why the task is not firing; "" when it is.
	NotFiring string
	// Failing: the last flag_after ticks' runs all failed. Starved: the last
	// flag_after ticks ran nothing (every entity skipped, the source listed
	// none, or it failed).
	Failing, Starved bool
}

// Flags lists the flags that are up, by name: not_firing, failing, starved.
func (h Health) Flags() []string {
	fs := []string{}
	if h.NotFiring != "" {
		fs = append(fs, "not_firing")
	}
	if h.Failing {
		fs = append(fs, "failing")
	}
	if h.Starved {
		fs = append(fs, "starved")
	}
	return fs
}

// Past is what the history holds about a task, read for Assess.
type Past struct {
	Ticks    []driver.TickRecord // newest first
	Actions  []driver.Action     // newest first
	Paused   bool
	Replicas []driver.Replica // every replica whose announcement is current
}

// ReadPast reads what Assess needs of task t: its newest limit tick records
// (at least flag_after), its actions, whether it is paused, the replicas.
func ReadPast(ctx context.Context, store *lease.Store, t *config.Task, limit int) (Past, error) {
	pauses, err := store.Fleet().Pauses(ctx)
	if err != nil {
		return Past{}, err
	}
	replicas, err := store.Fleet().Replicas(ctx)
	if err != nil {
		return Past{}, err
	}
	ps, err := ReadPasts(ctx, store, []*config.Task{t}, limit, driver.DefaultHistory().Actions, pauses, replicas)
	if err != nil {
		return Past{}, err
	}
	return ps[0], nil
}

// RecentActions is how many of a task's actions Assess is given where only
// its flags and latest ticks are shown: the pauses and resumes among them
// say which expected ticks were not missed.
const RecentActions = 20

// ReadPasts reads, in one round trip, what Assess needs of each task of ts:
// its newest ticks (at least flag_after + 2, the most the flags look at)
// and its newest actions. Whether each is paused and the replicas are read
// once for all, by the caller.
func ReadPasts(ctx context.Context, store *lease.Store, ts []*config.Task, ticks, actions int, pauses map[string]driver.PauseInfo, replicas []driver.Replica) ([]Past, error) {
	reads := make([]driver.HistoryRead, len(ts))
	for i, t := range ts {
		reads[i] = driver.HistoryRead{Task: t.Name, Ticks: max(ticks, t.FlagAfter+2), Actions: actions}
	}
	hs, err := store.Fleet().Histories(ctx, reads)
	if err != nil {
		return nil, err
	}
	ps := make([]Past, len(ts))
	for i, t := range ts {
		_, paused := pauses[t.Name]
		ps[i] = Past{Ticks: hs[i].Ticks, Actions: hs[i].Actions, Paused: paused, Replicas: replicas}
	}
	return ps, nil
}

// maxMissed bounds the missed ticks Assess shows between two records.
const maxMissed = 100

// Assess reads task t's history at now: its ticks newest first, the missed
// ones among them, and its health.
func Assess(t *config.Task, now time.Time, p Past) ([]TickView, Health) {
	live := map[string]bool{}
	var runners []driver.Replica
	for _, r := range p.Replicas {
		live[r.ID] = true
		if slices.Contains(r.Tasks, t.Name) {
			runners = append(runners, r)
		}
	}
	due := now.Add(-t.MissingAfter()) // ticks up to here must have a record
	// A tick is missed as soon as a later one is due too (a catch-up runs
	// only the latest): every tick before the latest due one needs a record.
	upTo := due
	if latest := latestTick(t.Schedule, now); !latest.IsZero() && latest.Add(-time.Nanosecond).After(due) {
		upTo = latest.Add(-time.Nanosecond)
	}
	views := make([]TickView, 0, len(p.Ticks))
	// Missed: the ticks the schedule expected between a record and the next
	// newer one (or due), while the task was not paused; the ticks a pause
	// held back are one paused row.
	missed := func(after, upTo time.Time) {
		var ms []TickView
		for T := t.Schedule.Next(after); !T.IsZero() && !T.After(upTo) && len(ms) < maxMissed; T = t.Schedule.Next(T) {
			switch a := pauseAt(p.Actions, T); {
			case a == nil:
				ms = append(ms, TickView{TickRecord: driver.TickRecord{Tick: T}, State: TickMissed})
			case len(ms) == 0 || ms[len(ms)-1].Pause != a:
				ms = append(ms, TickView{TickRecord: driver.TickRecord{Tick: T}, State: TickPaused, Pause: a})
			}
		}
		slices.Reverse(ms)
		views = append(views, ms...)
	}
	// A record off the current schedule was made under another (a schedule
	// changed by a reload, or a rollout): the ticks the current one had
	// between it and its neighbours were not expected then, and are not
	// shown as missed.
	onSchedule := func(T time.Time) bool { return t.Schedule.Next(T.Add(-time.Nanosecond)).Equal(T) }
	newer, newerOn := upTo, true
	for _, r := range p.Ticks {
		on := onSchedule(r.Tick)
		if r.Tick.Before(newer) && on && newerOn {
			missed(r.Tick, newer)
		}
		views = append(views, TickView{TickRecord: r, State: State(r, live)})
		newer, newerOn = r.Tick.Add(-time.Nanosecond), on
	}
	var h Health
	h.NotFiring = notFiring(t, now, p, runners)
	h.Failing, h.Starved = failingStarved(t, views, due)
	return views, h
}

// State is tick record r's state: complete, waiting, running, or
// incomplete when a part is left unfinished by a replica not in live.
func State(r driver.TickRecord, live map[string]bool) string {
	if r.Final() {
		if r.Waiting() > 0 {
			return TickWaiting
		}
		return TickComplete
	}
	for _, part := range r.Parts {
		if !part.Final && !live[part.Replica] {
			return TickIncomplete
		}
	}
	return TickRunning
}

// notFiring says why t is not firing, or "". A paused task is not flagged.
// Otherwise it is when no replica runs it, or when a tick the schedule
// expected after the newest record, after its last resume and after the
// replicas that run it started, has no record a grace later.
func notFiring(t *config.Task, now time.Time, p Past, runners []driver.Replica) string {
	if p.Paused || registry.Forgotten(t) {
		return ""
	}
	if len(p.Replicas) == 0 {
		return "no replica is running (no tickd announces itself in this Redis)"
	}
	if len(runners) == 0 {
		return fmt.Sprintf("no replica runs this task: the %d running do not have it (is every replica's config older?)", len(p.Replicas))
	}
	from := runners[0].Since
	for _, r := range runners[1:] {
		if r.Since.Before(from) {
			from = r.Since
		}
	}
	if len(p.Ticks) > 0 && p.Ticks[0].Tick.After(from) {
		from = p.Ticks[0].Tick
	}
	for _, a := range p.Actions {
		if a.What == driver.ActionResume && a.At.After(from) {
			from = a.At
			break
		}
	}
	T := t.Schedule.Next(from)
	if T.IsZero() || T.After(now.Add(-t.MissingAfter())) {
		return ""
	}
	return fmt.Sprintf("no record of the tick at %s, due %s ago", T.UTC().Format(time.RFC3339), now.Sub(T).Round(time.Second))
}

// failingStarved looks at the newest flag_after ticks that are over (or
// old enough to be): failing when every one's runs all failed, starved when
// none ran anything.
func failingStarved(t *config.Task, views []TickView, due time.Time) (failing, starved bool) {
	n := 0
	failing, starved = true, true
	for _, v := range views {
		if (v.State == TickRunning || v.State == TickWaiting) && v.Tick.After(due) || v.State == TickMissed || v.State == TickPaused {
			continue
		}
		n++
		runs := v.Runs()
		failed := 0
		for o, c := range v.Outcomes() {
			if driver.Failed(o) {
				failed += c
			}
		}
		failing = failing && runs > 0 && failed == runs
		starved = starved && runs == 0
		if n == t.FlagAfter {
			return failing, starved
		}
	}
	return false, false
}

// pauseAt is the pause action (of actions, newest first) that held the task
// paused at T, or nil: the newest pause or resume before T, when it was a
// pause that had not ended. A pause changed later (its reason, its end) is
// the one that began it.
func pauseAt(actions []driver.Action, T time.Time) *driver.Action {
	for i := range actions {
		a := &actions[i]
		if a.At.After(T) {
			continue
		}
		switch a.What {
		case driver.ActionPause:
			if !a.Until.IsZero() && !a.Until.After(T) {
				return nil
			}
			for j := i + 1; j < len(actions) && actions[j].What == driver.ActionPause; j++ {
				a = &actions[j] // an earlier pause this one changed
			}
			return a
		case driver.ActionResume:
			return nil
		}
	}
	return nil
}

// Paused says whether the task whose actions (newest first) these are was
// paused at T: a tick then was not missed, it was skipped.
func Paused(actions []driver.Action, T time.Time) bool { return pauseAt(actions, T) != nil }

// latestTick is the latest tick of s at or before now (zero for none within
// a year), looked for in windows that grow, so that a schedule of seconds
// is not walked over a year.
func latestTick(s schedule.Schedule, now time.Time) time.Time {
	for _, w := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 366 * 24 * time.Hour} {
		if T := schedule.Prev(s, now, w); !T.IsZero() {
			return T
		}
	}
	return time.Time{}
}

// AssessOrphan is Assess for a task no config lists: while no replica runs
// it, it is not firing, and says since when and what to do about it.
func AssessOrphan(o *registry.Orphan, now time.Time, p Past) ([]TickView, Health) {
	views, h := Assess(&o.Task, now, p)
	if h.NotFiring != "" && len(registry.RunnerIDs(p.Replicas, o.Name)) == 0 {
		h.NotFiring = fmt.Sprintf("no config lists this task any more: last run by %s, registered %s; "+
			"if it is gone on purpose, say so with tickd forget %s", o.Info.By, o.Info.Seen.UTC().Format(time.RFC3339), o.Name)
	}
	return views, h
}
