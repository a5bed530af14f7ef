package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// What happened: every tick of a task leaves a TickRecord, every failed
// run a Failure, every operator's action an Action. They live beside the
// task's leases (its bucket's hash tag), bounded by a Retention, and are
// written apart from the runs: the scheduler gathers them in memory and
// writes a replica's part of a tick once when its fan-out ends and once
// when its last run of the tick ends, never once per run.

// TickPart is one replica's part in one tick of a task.
type TickPart struct {
	Replica string
	// Final says that every run this replica started for the tick has
	// ended (or that it started none). A part left not final by a replica
	// that is gone makes its tick incomplete.
	Final   bool
	Written time.Time // when the replica wrote it
	// Entities is how many entities its source listed; Started how many
	// tick runs it started.
	Entities, Started int
	// Outcomes counts the ended runs by outcome; Skipped the entities it
	// did not run, by reason (SkipBusy…).
	Outcomes map[Outcome]int
	Skipped  map[string]int
	// SourceFailed: the entity source failed (the entities listed until
	// then were run); SourceError is why (its first MaxSourceError bytes:
	// for a command, its exit status and the end of its stderr).
	SourceFailed bool
	SourceError  string
	// FirstStart is how long after the tick its first run started, LastEnd
	// how long after the tick its last run ended; -1 when none did.
	FirstStart, LastEnd time.Duration
}

// The reasons a tick skips an entity, in TickPart.Skipped.
const (
	SkipBusy            = "busy"
	SkipAlreadyRan      = "already_ran"
	SkipQuarantined     = "quarantined"
	SkipNotAcknowledged = "not_acknowledged"
	SkipError           = "error"   // the store failed until the tick was too late
	SkipStopped         = "stopped" // shutdown or a reload stopped the fan-out first
)

// TickRecord is one tick of a task: the parts of the replicas that took
// part in it.
type TickRecord struct {
	Tick  time.Time
	Parts []TickPart
}

// Runs is how many runs the tick started, on all replicas.
func (r TickRecord) Runs() int {
	n := 0
	for _, p := range r.Parts {
		n += p.Started
	}
	return n
}

// Entities is how many entities the tick listed: the most any replica's
// source listed (each reads the whole source).
func (r TickRecord) Entities() int {
	n := 0
	for _, p := range r.Parts {
		n = max(n, p.Entities)
	}
	return n
}

// Outcomes counts the tick's ended runs by outcome.
func (r TickRecord) Outcomes() map[Outcome]int {
	m := map[Outcome]int{}
	for _, p := range r.Parts {
		for o, n := range p.Outcomes {
			m[o] += n
		}
	}
	return m
}

// Skipped counts the entities the tick did not run, by reason. The replicas
// of a tick share its entities out: what one of them counts as already run
// is mostly another's run, and an entity sent entity by entity (not in a
// chunk) may be found busy by each. With several parts, each reason's count
// is the parts' sum cut to what the runs left of the entities listed, and
// already_ran is what is left after the other reasons.
func (r TickRecord) Skipped() map[string]int {
	m := map[string]int{}
	for _, p := range r.Parts {
		for k, n := range p.Skipped {
			m[k] += n
		}
	}
	if len(r.Parts) > 1 {
		left := max(0, r.Entities()-r.Runs())
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k != SkipAlreadyRan {
				m[k] = min(m[k], left)
				left -= m[k]
			}
		}
		m[SkipAlreadyRan] = left
	}
	maps.DeleteFunc(m, func(_ string, n int) bool { return n == 0 })
	return m
}

// SourceFailed says whether a replica's entity source failed.
func (r TickRecord) SourceFailed() bool {
	return slices.ContainsFunc(r.Parts, func(p TickPart) bool { return p.SourceFailed })
}

// SourceError is why a replica's entity source failed (the first replica's
// that says), or "".
func (r TickRecord) SourceError() string {
	for _, p := range r.Parts {
		if p.SourceError != "" {
			return p.SourceError
		}
	}
	return ""
}

// FirstStart is how long after the tick its first run started; -1: none.
func (r TickRecord) FirstStart() time.Duration {
	d := time.Duration(-1)
	for _, p := range r.Parts {
		if p.FirstStart >= 0 && (d < 0 || p.FirstStart < d) {
			d = p.FirstStart
		}
	}
	return d
}

// LastEnd is how long after the tick its last run ended; -1: none.
func (r TickRecord) LastEnd() time.Duration {
	d := time.Duration(-1)
	for _, p := range r.Parts {
		d = max(d, p.LastEnd)
	}
	return d
}

// Final says whether every part is final: all the runs the tick started
// have ended.
func (r TickRecord) Final() bool {
	return !slices.ContainsFunc(r.Parts, func(p TickPart) bool { return !p.Final })
}

// Replicas lists the replicas that took part, in the order they wrote.
func (r TickRecord) Replicas() []string {
	rs := make([]string, len(r.Parts))
	for i, p := range r.Parts {
		rs[i] = p.Replica
	}
	return rs
}

// Retention bounds what is kept of a task's history. Every write enforces
// it on what it writes to.
type Retention struct {
	Ticks    int           // tick records kept, the newest
	Age      time.Duration // and none older than this
	Failures int           // failed runs kept, the newest
	Actions  int           // operator actions kept, the newest
}

// DefaultRetention keeps a week of 15-minute ticks.
var DefaultRetention = Retention{Ticks: 672, Age: 7 * 24 * time.Hour, Failures: 50, Actions: 100}

// TickWrite is one replica's part of one tick, to be written.
type TickWrite struct {
	Task string
	Tick time.Time
	Part TickPart
	Keep Retention
}

// RecordTicks writes replicas' parts of ticks, each over its replica's
// earlier part of the same tick, in one round trip.
func (s *Store) RecordTicks(ctx context.Context, ws []TickWrite) error {
	if len(ws) == 0 {
		return nil
	}
	if err := s.b.recordTicks(ctx, ws); err != nil {
		return fmt.Errorf("record ticks: %w", err)
	}
	return nil
}

// Ticks returns task's newest tick records, newest first, at most limit.
func (s *Store) Ticks(ctx context.Context, task string, limit int) ([]TickRecord, error) {
	els, err := s.b.ticks(ctx, task, limit)
	if err != nil {
		return nil, fmt.Errorf("read ticks of %s: %w", task, err)
	}
	return decodeTicks(els), nil
}

// decodeTicks decodes tick records, leaving out any it cannot read.
func decodeTicks(els []string) []TickRecord {
	rs := make([]TickRecord, 0, len(els))
	for _, el := range els {
		if r, err := decodeTickRecord(el); err == nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// Failure is one failed run (outcome failed, timeout or lease_lost).
type Failure struct {
	Task    string    `json:"task"`
	Entity  string    `json:"entity"`
	Tick    time.Time `json:"tick"`
	Reason  Reason    `json:"reason"`
	Fence   int64     `json:"fence"`
	Replica string    `json:"replica"`
	Started time.Time `json:"started_at"`
	Ended   time.Time `json:"ended_at"`
	Outcome Outcome   `json:"outcome"`
	Error   string    `json:"error"`
	Output  string    `json:"output"` // the end of the run's output
}

// Failed says whether o is a failure the history keeps.
func Failed(o Outcome) bool {
	return o == OutcomeFailed || o == OutcomeTimeout || o == OutcomeLeaseLost
}

// RecordFailures adds failed runs to their tasks' recent failures, each
// task's list cut to keep[task].Failures (DefaultRetention's without one),
// and the newest of them to the prefix's list, every task's failures
// (DefaultRetention.Failures kept), in the same round trip: the console's
// failures page reads that one list however many tasks there are.
func (s *Store) RecordFailures(ctx context.Context, fs []Failure, keep func(task string) Retention) error {
	return s.pushWithFleet(ctx, listFailures, len(fs), func(i int) (string, any) { return fs[i].Task, fs[i] }, keep)
}

// Failures returns task's newest failures, newest first, at most limit.
func (s *Store) Failures(ctx context.Context, task string, limit int) ([]Failure, error) {
	return readList[Failure](ctx, s, listFailures, task, limit)
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
// DefaultRetention.Actions), which the console's actions page reads in one
// call however many tasks there are.
func (s *Store) RecordAction(ctx context.Context, a Action, keep Retention) error {
	return s.pushWithFleet(ctx, listActions, 1, func(int) (string, any) { return a.Task, a }, func(string) Retention { return keep })
}

// pushWithFleet is push, and also puts the newest of the values of a task
// (as many as DefaultRetention keeps of list) into the prefix's list, in
// the same round trip: the prefix's list is the whole fleet's, newest
// first, kept to DefaultRetention. A value of the prefix itself (task "")
// goes there once.
func (s *Store) pushWithFleet(ctx context.Context, list string, n int, at func(i int) (string, any), keep func(string) Retention) error {
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
	limit := DefaultRetention.Failures
	if list == listActions {
		limit = DefaultRetention.Actions
	}
	vals = append(vals, fleet[max(0, len(fleet)-limit):]...) // the newest: the prefix's list keeps no more
	return s.push(ctx, list, len(vals), func(i int) (string, any) { return vals[i].task, vals[i].v }, func(task string) Retention {
		if task == "" {
			return DefaultRetention
		}
		return keep(task)
	})
}

// Actions returns task's newest actions (the prefix's for ""), newest
// first, at most limit.
func (s *Store) Actions(ctx context.Context, task string, limit int) ([]Action, error) {
	return readList[Action](ctx, s, listActions, task, limit)
}

// HistoryRead asks for a task's newest Ticks tick records and Actions
// actions.
type HistoryRead struct {
	Task           string
	Ticks, Actions int
}

// TaskHistory is what a HistoryRead found, newest first.
type TaskHistory struct {
	Ticks   []TickRecord
	Actions []Action
}

// Histories reads the tick records and actions of many tasks in one round
// trip: what a page of tasks, or the health checks of every task, read.
func (s *Store) Histories(ctx context.Context, reads []HistoryRead) ([]TaskHistory, error) {
	ticks, actions, err := s.b.histories(ctx, reads)
	if err != nil {
		return nil, fmt.Errorf("read the history of %d task(s): %w", len(reads), err)
	}
	out := make([]TaskHistory, len(reads))
	for i := range reads {
		out[i] = TaskHistory{Ticks: decodeTicks(ticks[i]), Actions: decodeJSON[Action](actions[i])}
	}
	return out, nil
}

// The lists a task keeps beside its tick records.
const (
	listFailures = "failures"
	listActions  = "actions"
)

// listPush is values to push onto one task's list, and how many to keep.
type listPush struct {
	task string
	vals []string // oldest first: the last pushed is the newest
	keep int
}

func (s *Store) push(ctx context.Context, list string, n int, at func(i int) (string, any), keep func(string) Retention) error {
	if n == 0 {
		return nil
	}
	by := map[string]*listPush{}
	var order []*listPush
	for i := range n {
		task, v := at(i)
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		p := by[task]
		if p == nil {
			k := keep(task)
			p = &listPush{task: task, keep: k.Failures}
			if list == listActions {
				p.keep = k.Actions
			}
			p.keep = max(p.keep, 1)
			by[task] = p
			order = append(order, p)
		}
		p.vals = append(p.vals, string(data))
	}
	if err := s.b.push(ctx, list, order); err != nil {
		return fmt.Errorf("record %s: %w", list, err)
	}
	return nil
}

func readList[T any](ctx context.Context, s *Store, list, task string, limit int) ([]T, error) {
	vals, err := s.b.list(ctx, list, task, limit)
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
