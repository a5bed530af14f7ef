package lease

import (
	"context"
	"fmt"

	"github.com/tickd/tickd/lease/driver"
)

// What happened: every tick of a task leaves a TickRecord, every failed
// run a Failure, every operator's action an Action. They live beside the
// task's leases (its bucket's hash tag), bounded by a Retention, and are
// written apart from the runs: the scheduler gathers them in memory and
// writes a replica's part of a tick once when its fan-out ends and once
// when its last run of the tick ends, never once per run.

// RecordTicks writes replicas' parts of ticks, each over its replica's
// earlier part of the same tick, in one round trip.
func (f Fleet) RecordTicks(ctx context.Context, ws []driver.TickWrite) error {
	s := f.s
	if len(ws) == 0 {
		return nil
	}
	if err := s.b.RecordTicks(ctx, ws); err != nil {
		return fmt.Errorf("record ticks: %w", err)
	}
	return nil
}

// Ticks returns task's newest tick records, newest first, at most limit.
func (f Fleet) Ticks(ctx context.Context, task string, limit int) ([]driver.TickRecord, error) {
	s := f.s
	rs, err := s.b.Ticks(ctx, task, limit)
	if err != nil {
		return nil, fmt.Errorf("read ticks of %s: %w", task, err)
	}
	return rs, nil
}

// RecordFailures adds failed runs to their tasks' recent failures, each
// task's list cut to keep[task].Failures (DefaultHistory's without one),
// and the newest of them to the prefix's list, every task's failures
// (DefaultHistory's Failures kept), in the same round trip: the console's
// failures page reads that one list however many tasks there are.
func (f Fleet) RecordFailures(ctx context.Context, fs []driver.Failure, keep func(task string) driver.Retention) error {
	var fleet []driver.Failure
	for _, x := range fs {
		if x.Task != "" {
			fleet = append(fleet, x)
		}
	}
	fleet = fleet[max(0, len(fleet)-driver.DefaultHistory().Failures):] // the newest: the prefix's list keeps no more
	ps := listPushes(keep)
	for i := range fs {
		p := ps.of(fs[i].Task)
		p.Failures = append(p.Failures, fs[i])
	}
	if len(fleet) > 0 {
		p := ps.of("")
		p.Failures = append(p.Failures, fleet...)
	}
	return f.push(ctx, "failures", ps)
}

// Failures returns task's newest failures, newest first, at most limit.
func (f Fleet) Failures(ctx context.Context, task string, limit int) ([]driver.Failure, error) {
	fs, err := f.s.b.Failures(ctx, task, limit)
	if err != nil {
		return nil, fmt.Errorf("read failures of %s: %w", task, err)
	}
	return fs, nil
}

// RecordAction adds an operator's action to its task's list (or to the
// prefix's, for a.Task ""), cut to keep.Actions.
//
// A task's action goes into the prefix's list too, in the same round trip:
// that list is every action of the fleet, newest first (kept to
// DefaultHistory's Actions), which the console's actions page reads in one
// call however many tasks there are.
func (f Fleet) RecordAction(ctx context.Context, a driver.Action, keep driver.Retention) error {
	ps := listPushes(func(string) driver.Retention { return keep })
	p := ps.of(a.Task)
	p.Actions = append(p.Actions, a)
	if a.Task != "" {
		p := ps.of("")
		p.Actions = append(p.Actions, a)
	}
	return f.push(ctx, "actions", ps)
}

// Actions returns task's newest actions (the prefix's for ""), newest
// first, at most limit.
func (f Fleet) Actions(ctx context.Context, task string, limit int) ([]driver.Action, error) {
	as, err := f.s.b.Actions(ctx, task, limit)
	if err != nil {
		return nil, fmt.Errorf("read actions of %s: %w", task, err)
	}
	return as, nil
}

// TaskHistory is what a HistoryRead found, newest first.
type TaskHistory struct {
	Ticks   []driver.TickRecord
	Actions []driver.Action
}

// Histories reads the tick records and actions of many tasks in one round
// trip: what a page of tasks, or the health checks of every task, read.
func (f Fleet) Histories(ctx context.Context, reads []driver.HistoryRead) ([]TaskHistory, error) {
	ticks, actions, err := f.s.b.Histories(ctx, reads)
	if err != nil {
		return nil, fmt.Errorf("read the history of %d task(s): %w", len(reads), err)
	}
	out := make([]TaskHistory, len(reads))
	for i := range reads {
		out[i] = TaskHistory{Ticks: ticks[i], Actions: actions[i]}
	}
	return out, nil
}

// pushes are a push's lists, one per task, in the order first named.
type pushes struct {
	ps   []driver.ListPush
	at   map[string]int // task → its index in ps
	keep func(task string) driver.Retention
}

// listPushes makes pushes whose lists are kept as keep says (the
// prefix's as DefaultHistory).
func listPushes(keep func(string) driver.Retention) *pushes {
	return &pushes{at: map[string]int{}, keep: keep}
}

// of is task's push: valid until the next call.
func (p *pushes) of(task string) *driver.ListPush {
	if i, ok := p.at[task]; ok {
		return &p.ps[i]
	}
	p.at[task] = len(p.ps)
	k := driver.DefaultHistory()
	if task != "" {
		k = p.keep(task)
	}
	k.Failures, k.Actions = max(k.Failures, 1), max(k.Actions, 1)
	p.ps = append(p.ps, driver.ListPush{Task: task, Keep: k})
	return &p.ps[len(p.ps)-1]
}

func (f Fleet) push(ctx context.Context, what string, p *pushes) error {
	if len(p.ps) == 0 {
		return nil
	}
	if err := f.s.b.Push(ctx, p.ps); err != nil {
		return fmt.Errorf("record %s: %w", what, err)
	}
	return nil
}
