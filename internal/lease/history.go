package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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

// Failure is one failed run (outcome failed, timeout or lease_lost).
type Failure struct {
	Task    string         `json:"task"`
	Entity  string         `json:"entity"`
	Tick    time.Time      `json:"tick"`
	Reason  driver.Reason  `json:"reason"`
	Fence   int64          `json:"fence"`
	Replica string         `json:"replica"`
	Started time.Time      `json:"started_at"`
	Ended   time.Time      `json:"ended_at"`
	Outcome driver.Outcome `json:"outcome"`
	Error   string         `json:"error"`
	Output  string         `json:"output"` // the end of the run's output
}

// Failed says whether o is a failure the history keeps.
func Failed(o driver.Outcome) bool {
	return o == driver.OutcomeFailed || o == driver.OutcomeTimeout || o == driver.OutcomeLeaseLost
}

// RecordFailures adds failed runs to their tasks' recent failures, each
// task's list cut to keep[task].Failures (DefaultHistory's without one),
// and the newest of them to the prefix's list, every task's failures
// (DefaultHistory's Failures kept), in the same round trip: the console's
// failures page reads that one list however many tasks there are.
func (f Fleet) RecordFailures(ctx context.Context, fs []Failure, keep func(task string) driver.Retention) error {
	return f.pushWithFleet(ctx, driver.ListFailures, len(fs), func(i int) (string, any) { return fs[i].Task, fs[i] }, keep)
}

// Failures returns task's newest failures, newest first, at most limit.
func (f Fleet) Failures(ctx context.Context, task string, limit int) ([]Failure, error) {
	s := f.s
	return readList[Failure](ctx, s, driver.ListFailures, task, limit)
}

// Action is what an operator did (internal/ops does each).
type Action struct {
	Task     string     `json:"task"` // "" for the whole prefix (migrate)
	At       time.Time  `json:"at"`
	By       string     `json:"by"`
	What     ActionKind `json:"action"`
	Entities []string   `json:"entities"`
	Reason   string     `json:"reason"`
	Until    time.Time  `json:"until"` // a pause's end; zero: none
	Detail   string     `json:"detail"`
}

// ActionKind is the kind of an operator's action, as the history keeps it.
type ActionKind string

// The actions.
const (
	ActionTrigger ActionKind = "trigger"
	ActionPause   ActionKind = "pause" // or a change of the pause in force (Detail says so)
	ActionResume  ActionKind = "resume"
	ActionUnlock  ActionKind = "unlock"
	ActionForget  ActionKind = "forget"  // a task taken out of the task registry
	ActionMigrate ActionKind = "migrate" // of the whole prefix: Task is ""
)

// RecordAction adds an operator's action to its task's list (or to the
// prefix's, for a.Task ""), cut to keep.Actions.
//
// A task's action goes into the prefix's list too, in the same round trip:
// that list is every action of the fleet, newest first (kept to
// DefaultHistory's Actions), which the console's actions page reads in one
// call however many tasks there are.
func (f Fleet) RecordAction(ctx context.Context, a Action, keep driver.Retention) error {
	return f.pushWithFleet(ctx, driver.ListActions, 1, func(int) (string, any) { return a.Task, a }, func(string) driver.Retention { return keep })
}

// pushWithFleet is push, and also puts the newest of the values of a task
// (as many as DefaultHistory keeps of list) into the prefix's list, in
// the same round trip: the prefix's list is the whole fleet's, newest
// first, kept to DefaultHistory. A value of the prefix itself (task "")
// goes there once.
func (f Fleet) pushWithFleet(ctx context.Context, list string, n int, at func(i int) (string, any), keep func(string) driver.Retention) error {
	type value struct {
		task string
		v    any
	}
	vals := make([]value, 0, n)
	var fleet []value
	for i := range n {
		task, v := at(i)
		vals = append(vals, value{task, v})
		if task != "" {
			fleet = append(fleet, value{"", v})
		}
	}
	limit := driver.DefaultHistory().Failures
	if list == driver.ListActions {
		limit = driver.DefaultHistory().Actions
	}
	vals = append(vals, fleet[max(0, len(fleet)-limit):]...) // the newest: the prefix's list keeps no more
	return f.push(ctx, list, len(vals), func(i int) (string, any) { return vals[i].task, vals[i].v }, func(task string) driver.Retention {
		if task == "" {
			return driver.DefaultHistory()
		}
		return keep(task)
	})
}

// Actions returns task's newest actions (the prefix's for ""), newest
// first, at most limit.
func (f Fleet) Actions(ctx context.Context, task string, limit int) ([]Action, error) {
	s := f.s
	return readList[Action](ctx, s, driver.ListActions, task, limit)
}

// TaskHistory is what a HistoryRead found, newest first.
type TaskHistory struct {
	Ticks   []driver.TickRecord
	Actions []Action
}

// Histories reads the tick records and actions of many tasks in one round
// trip: what a page of tasks, or the health checks of every task, read.
func (f Fleet) Histories(ctx context.Context, reads []driver.HistoryRead) ([]TaskHistory, error) {
	s := f.s
	ticks, actions, err := s.b.Histories(ctx, reads)
	if err != nil {
		return nil, fmt.Errorf("read the history of %d task(s): %w", len(reads), err)
	}
	out := make([]TaskHistory, len(reads))
	for i := range reads {
		out[i] = TaskHistory{Ticks: ticks[i], Actions: decodeJSON[Action](actions[i])}
	}
	return out, nil
}

func (f Fleet) push(ctx context.Context, list string, n int, at func(i int) (string, any), keep func(string) driver.Retention) error {
	s := f.s
	if n == 0 {
		return nil
	}
	by := map[string]*driver.ListPush{}
	var order []*driver.ListPush
	for i := range n {
		task, v := at(i)
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		p := by[task]
		if p == nil {
			k := keep(task)
			p = &driver.ListPush{Task: task, Keep: k.Failures}
			if list == driver.ListActions {
				p.Keep = k.Actions
			}
			p.Keep = max(p.Keep, 1)
			by[task] = p
			order = append(order, p)
		}
		p.Vals = append(p.Vals, string(data))
	}
	if err := s.b.Push(ctx, list, order); err != nil {
		return fmt.Errorf("record %s: %w", list, err)
	}
	return nil
}

func readList[T any](ctx context.Context, s *Store, list, task string, limit int) ([]T, error) {
	vals, err := s.b.List(ctx, list, task, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", list, task, err)
	}
	return decodeJSON[T](vals), nil
}

// decodeJSON decodes a list's JSON values, leaving out any it cannot read.
func decodeJSON[T any](vals []string) []T {
	out := make([]T, 0, len(vals))
	for _, v := range vals {
		var x T
		if json.Unmarshal([]byte(v), &x) == nil {
			out = append(out, x)
		}
	}
	return out
}
