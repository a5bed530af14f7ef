// Package ops is the operator's actions, one way for the command line and
// the console alike: trigger, pause, resume, unlock, forget and migrate.
// Each does what it says over a store, records itself in the history as
// an action of its kind (driver.ActionKind), with who did it, and says in
// words what it did and how long it takes. A record that cannot be written
// does not undo the action: the result carries the error (Recorded), for
// the caller to report its way.
package ops

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/registry"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/redisdriver"
	"github.com/tickd/tickd/tasks"
)

// MaxReason bounds a pause's, a resume's or a forget's reason (a 9 MB one
// was once shown on every page and logged whole).
const MaxReason = 1000

// Done is what every action returns: the record it left, what it did in
// words, and whether the record could be written (nil: yes).
type Done struct {
	Action   driver.Action
	Said     string
	Recorded error
}

// record keeps a in the history of t (of the prefix for t nil), under t's
// retention, into d.
func record(ctx context.Context, store *lease.Store, t *config.Task, a driver.Action, said string) Done {
	keep := driver.DefaultHistory()
	if t != nil {
		keep = leaseconf.Retention(t)
	}
	return Done{Action: a, Said: said, Recorded: store.Fleet().RecordAction(ctx, a, keep)}
}

// ErrReason is the error of a reason over MaxReason.
var ErrReason = fmt.Errorf("a reason is at most %d bytes", MaxReason)

// checkReason refuses a reason over MaxReason.
func checkReason(reason string) error {
	if len(reason) > MaxReason {
		return fmt.Errorf("the reason is %d bytes: %w", len(reason), ErrReason)
	}
	return nil
}

// maxRecordedIDs is how many of a trigger's entities its action record
// lists.
const maxRecordedIDs = 20

// NotListed is the error of a trigger of entities the task's static list
// or file does not have: a typo would otherwise run a task for an entity
// that does not exist. The command line lets -force through.
type NotListed struct {
	Task    string
	Missing []string
	Source  string // where the task's entities come from, in words
}

func (e *NotListed) Error() string {
	q := make([]string, len(e.Missing))
	for i, id := range e.Missing {
		q[i] = strconv.Quote(id)
	}
	return fmt.Sprintf("%s does not list %s (%s)", e.Task, strings.Join(q, ", "), e.Source)
}

// TriggerIDs are the entities to trigger: those given (checked against
// the task's list unless force: *NotListed), or every entity of the task.
func TriggerIDs(ctx context.Context, t config.Task, given []string, force bool) ([]string, error) {
	ids := given
	if len(ids) == 0 {
		err := t.Source(nil).Each(ctx, func(id string) error { ids = append(ids, id); return nil })
		if err != nil {
			return nil, err
		}
	}
	ids = unique(ids)
	for _, id := range ids {
		if err := tasks.CheckID(id); err != nil || id == "" {
			return nil, fmt.Errorf("entity %q: %v", id, err)
		}
	}
	if len(given) > 0 && !force {
		if err := checkListed(ctx, t, ids); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// checkListed refuses ids that the task's entity source does not list. A
// static list, a file and a singleton's name are checked; an
// entities_command is not run (it may be slow, or have effects), so every
// id of such a task needs force: an id no one checked never reaches its
// command (from a console, that was a way to run a shell's words).
func checkListed(ctx context.Context, t config.Task, ids []string) error {
	if t.EntitiesCommand != nil {
		return &NotListed{Task: t.Name, Missing: ids, Source: report.DescribeSource(t) + ", which a trigger does not run to check"}
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	err := t.Source(nil).Each(ctx, func(id string) error {
		delete(want, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the entities of %s: %w", t.Name, err)
	}
	if len(want) == 0 {
		return nil
	}
	nl := &NotListed{Task: t.Name, Source: report.DescribeSource(t)}
	for _, id := range ids {
		if want[id] {
			nl.Missing = append(nl.Missing, id)
		}
	}
	return nl
}

// unique drops repeated ids, keeping the first of each.
func unique(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Trigger enqueues a run of each id of t (TriggerIDs), each answering the
// request ids reqs (none: nothing waits for the answers).
func Trigger(ctx context.Context, store *lease.Store, t *config.Task, ids, reqs []string, by string) (Triggered, error) {
	for _, id := range ids {
		if err := store.Enqueue(ctx, driver.Due{Task: t.Name, Entity: id, Reason: driver.ReasonTrigger, Requests: reqs}, 0); err != nil {
			return Triggered{}, err
		}
	}
	a := driver.Action{Task: t.Name, At: time.Now(), By: by, What: driver.ActionTrigger, Entities: ids[:min(len(ids), maxRecordedIDs)]}
	if len(ids) > maxRecordedIDs {
		a.Detail = fmt.Sprintf("%d entities, the first %d listed", len(ids), maxRecordedIDs)
	}
	busy := BusyOf(ctx, store, t.Name, ids)
	said := fmt.Sprintf("triggered %d run(s) of %s", len(ids), t.Name)
	for _, b := range busy {
		said += fmt.Sprintf("\n%s %q: %s", t.Name, b.Entity, b.Said())
	}
	return Triggered{Done: record(ctx, store, t, a, said), Busy: busy}, nil
}

// Triggered is what a trigger did: the runs asked for, and the entities
// found busy, whose runs wait for their holders.
type Triggered struct {
	Done
	Busy []Busy
}

// Busy is an entity held when a run of it was triggered: the run waits for
// the holder to end (a follow-up), whatever the task's on_busy.
type Busy struct {
	Entity, Holder string
	Since          time.Time
}

// Said is what a trigger says of a busy entity.
func (b Busy) Said() string {
	return fmt.Sprintf("busy (held by %s since %s): runs when it is free", b.Holder, b.Since.UTC().Format(time.RFC3339))
}

// maxBusyRead bounds the entities a trigger reads the state of, one round
// trip each: a trigger of every entity of a large task says nothing of
// those beyond.
const maxBusyRead = 100

// BusyOf reads which of ids (the first maxBusyRead) are held now; an
// entity whose state cannot be read is left out.
func BusyOf(ctx context.Context, store *lease.Store, task string, ids []string) []Busy {
	out := []Busy{}
	for _, id := range ids[:min(len(ids), maxBusyRead)] {
		if st, err := store.Fleet().Entity(ctx, task, id); err == nil && st.Held != nil {
			out = append(out, Busy{Entity: id, Holder: st.Held.Holder, Since: st.Held.Since})
		}
	}
	return out
}

// Paused is what a pause or a resume did: Changed is false when the task
// was already in the state asked for and nothing was given to change
// (nothing is recorded then).
type Paused struct {
	Done
	Changed bool
	Pause   driver.PauseInfo // the pause in force after it, for a pause
}

// Pause pauses t with who, why (required) and for how long (0: until
// resumed). A pause of a paused task keeps who paused it and when, and
// changes the reason or the end given; without either, nothing changes.
func Pause(ctx context.Context, store *lease.Store, t *config.Task, by, reason string, forD time.Duration, now time.Time) (Paused, error) {
	if err := checkReason(reason); err != nil {
		return Paused{}, err
	}
	if forD < 0 {
		return Paused{}, fmt.Errorf("for %v: must not be negative", forD)
	}
	pauses, err := store.Fleet().Pauses(ctx)
	if err != nil {
		return Paused{}, err
	}
	cur, was := pauses[t.Name]
	if was && (reason == "" || reason == cur.Reason) && forD == 0 {
		return Paused{Done: Done{Said: fmt.Sprintf("%s is already paused (%s): nothing changed; give a reason or an end to change the pause",
			t.Name, pauseWords(cur, t))}, Pause: cur}, nil
	}
	p := driver.PauseInfo{By: by, At: now, Reason: reason}
	if was {
		p = cur
		if reason != "" {
			p.Reason = reason
		}
	}
	if forD > 0 {
		p.Until = now.Add(forD)
	}
	if err := store.Fleet().Pause(ctx, t.Name, p); err != nil {
		return Paused{}, err
	}
	a := driver.Action{Task: t.Name, At: now, By: by, What: driver.ActionPause, Reason: reason, Until: p.Until}
	said := fmt.Sprintf("paused %s%s: every replica stops ticking it, and stops its fan-out under way, within a second (no run of it starts after that); runs already started finish", t.Name, untilWords(p, t))
	if was {
		a.Detail = "changed the pause: " + pauseWords(p, t)
		said = fmt.Sprintf("%s was already paused; its pause is now: %s", t.Name, pauseWords(p, t))
	}
	return Paused{Done: record(ctx, store, t, a, said), Changed: true, Pause: p}, nil
}

// Resume resumes t, with who and why (may be empty).
func Resume(ctx context.Context, store *lease.Store, t *config.Task, by, reason string, now time.Time) (Paused, error) {
	if err := checkReason(reason); err != nil {
		return Paused{}, err
	}
	pauses, err := store.Fleet().Pauses(ctx)
	if err != nil {
		return Paused{}, err
	}
	cur, was := pauses[t.Name]
	if !was {
		return Paused{Done: Done{Said: t.Name + " is not paused: nothing changed"}}, nil
	}
	if err := store.Fleet().Resume(ctx, t.Name); err != nil {
		return Paused{}, err
	}
	a := driver.Action{Task: t.Name, At: now, By: by, What: driver.ActionResume, Reason: reason}
	return Paused{Done: record(ctx, store, t, a, fmt.Sprintf("resumed %s (paused %s)", t.Name, pauseWords(cur, t))), Changed: true}, nil
}

// pauseWords says who paused, when, why and until when, in t's zone.
func pauseWords(p driver.PauseInfo, t *config.Task) string {
	var b strings.Builder
	b.WriteString("by " + p.By)
	if !p.At.IsZero() {
		b.WriteString(" since " + p.At.In(t.Location).Format(time.RFC3339))
	}
	if p.Reason != "" {
		b.WriteString(": " + p.Reason)
	}
	b.WriteString(untilWords(p, t))
	return b.String()
}

func untilWords(p driver.PauseInfo, t *config.Task) string {
	if p.Until.IsZero() {
		return ""
	}
	return " until " + p.Until.In(t.Location).Format(time.RFC3339)
}

// Unlocked is what an unlock did.
type Unlocked struct {
	Done
	driver.Unlocked
}

// ErrNotHeld is the error of an unlock of an entity whose lease is not
// held.
var ErrNotHeld = driver.ErrNotHeld

// Unlock revokes the lease of t's entity (lease.Store.Unlock): its holder
// stops, then the entity is free; with force it is freed at once, though
// the holder's run may still be going. An unlock of a lease already
// revoked is not recorded again.
func Unlock(ctx context.Context, store *lease.Store, t *config.Task, entity, by string, force bool) (Unlocked, error) {
	u, err := store.Unlock(ctx, t.Name, entity, by, force)
	if err != nil {
		return Unlocked{}, err
	}
	said := unlockSaid(u, t.LeaseTTL)
	if u.Already {
		return Unlocked{Done: Done{Said: said}, Unlocked: u}, nil
	}
	a := driver.Action{Task: t.Name, At: time.Now(), By: by, What: driver.ActionUnlock, Entities: []string{entity}, Detail: said}
	return Unlocked{Done: record(ctx, store, t, a, said), Unlocked: u}, nil
}

// unlockSaid says what an unlock did and how long it takes: ttl is the
// task's lease_ttl (its holder renews every ttl/3).
func unlockSaid(u driver.Unlocked, ttl time.Duration) string {
	what := fmt.Sprintf("%s/%s (holder %s, fence %d)", u.Task, u.Entity, u.Holder, u.Fence)
	left := u.TTL.Round(time.Second)
	switch {
	case u.Freed:
		return fmt.Sprintf("released %s at once; the holder's run may still be going until its next renewal (within %s), "+
			"so a new run may overlap it", what, (ttl / 3).Round(time.Millisecond))
	case u.Already:
		return fmt.Sprintf("the lease of %s was already revoked: the entity is free once its holder has released it, "+
			"at the latest in %s (a forced unlock frees it now)", what, left)
	case u.Told:
		return fmt.Sprintf("revoked the lease of %s: its run was told to stop at once; the entity is free once it has "+
			"stopped, at the latest in %s", what, left)
	}
	return fmt.Sprintf("revoked the lease of %s: the holder is told at once (Redis publishes the revocation; at the latest at its "+
		"next renewal, within %s) and stops its run; the entity is free once it has stopped, at the latest in %s, and nothing "+
		"else runs on it before", what, (ttl / 3).Round(time.Millisecond), left)
}

// ErrStillRun is the error of a forget of a task a live replica runs.
var ErrStillRun = errors.New("a live replica runs it")

// Forget takes a task no replica runs any more out of the task registry:
// it is gone on purpose, and no longer flagged as not firing. Refused
// (ErrStillRun) while a live replica runs it.
func Forget(ctx context.Context, store *lease.Store, task, by, reason string) (Done, error) {
	if err := checkReason(reason); err != nil {
		return Done{}, err
	}
	replicas, err := store.Fleet().Replicas(ctx)
	if err != nil {
		return Done{}, err
	}
	if runners := registry.RunnerIDs(replicas, task); len(runners) > 0 {
		return Done{}, fmt.Errorf("%s is run by %s: take it out of their configs (and reload them) first: %w", task, strings.Join(runners, ", "), ErrStillRun)
	}
	found, err := store.Fleet().ForgetTask(ctx, task)
	if err != nil {
		return Done{}, err
	}
	if !found {
		return Done{}, fmt.Errorf("no task %q in the task registry: nothing to forget", task)
	}
	a := driver.Action{Task: task, At: time.Now(), By: by, What: driver.ActionForget, Reason: reason}
	return record(ctx, store, nil, a, "forgot "+task+": it is no longer flagged as not firing; its history stays until its retention ends"), nil
}

// Migration is what Migrate did.
type Migration struct {
	Layout    driver.Migrated    // an older layout's keys moved (none when in place)
	Resharded []driver.Resharded // tasks moved to the shard count their config gives
	Took      []time.Duration    // how long each move stopped its task
}

// Migrate moves an older tickd's keys into this version's layout (every
// replica stopped), then reshards each of shards' tasks (name → its
// config's count) whose recorded count differs (no replica running it).
func Migrate(ctx context.Context, store *lease.Store, shards map[string]int, by string) (Migration, Done, error) {
	var m Migration
	var perTask []driver.Action
	said := "key layout " + redisdriver.LayoutVersion + ": in place"
	var le *redisdriver.LayoutError
	switch err := store.Fleet().CheckLayout(ctx); {
	case errors.As(err, &le) && le.Other == "": // layout 1's keys: every tickd stopped, or refused
		if m.Layout, err = store.Fleet().Migrate(ctx); err != nil {
			return m, Done{}, err
		}
		said = fmt.Sprintf("key layout %s: moved %d task(s) and %d pending request(s)", redisdriver.LayoutVersion, m.Layout.Tasks, m.Layout.Due)
	case err != nil:
		return m, Done{}, err
	default: // layout 2 becomes 3 when no tickd runs; a reshard goes on beside running ones
		m.Layout, err = store.Fleet().Migrate(ctx)
		switch {
		case errors.Is(err, redisdriver.ErrReplicasRunning):
			said = "key layout kept (2): " + err.Error() + " to keep a tick's chunks as records (layout " + redisdriver.LayoutVersion + ")"
		case err != nil:
			return m, Done{}, err
		case m.Layout.From != "":
			said = fmt.Sprintf("key layout %s: moved from %s (a tick's chunks now kept as records; no key moved)", redisdriver.LayoutVersion, m.Layout.From)
		}
	}
	for _, task := range slices.Sorted(maps.Keys(shards)) { // each one, even in place: it may have state astray (Reshard looks)
		began := time.Now()
		r, err := store.Fleet().Reshard(ctx, task, shards[task])
		if err != nil {
			return m, Done{}, fmt.Errorf("reshard %s: %w", task, err)
		}
		took := time.Since(began)
		if r.From == r.To && r.Entities+r.FollowUps+r.Due == 0 {
			continue // in place, nothing astray: nothing was stopped
		}
		m.Resharded = append(m.Resharded, r)
		m.Took = append(m.Took, took)
		part := fmt.Sprintf("%d → %d shards, moved %d entities, %d follow-ups and %d pending requests in %v (nothing of it ran meanwhile)",
			r.From, r.To, r.Entities, r.FollowUps, r.Due, took.Round(time.Millisecond))
		said += "; " + task + ": " + part
		perTask = append(perTask, driver.Action{Task: task, At: time.Now(), By: by, What: driver.ActionMigrate, Detail: part})
	}
	if len(m.Resharded) == 0 {
		said += "; every task in the shards its config gives"
	}
	done := record(ctx, store, nil, driver.Action{At: time.Now(), By: by, What: driver.ActionMigrate, Detail: said}, said)
	// Each task resharded has it in its own actions too (history -actions
	// TASK, the task's page), not only in the prefix's.
	for _, a := range perTask {
		done.Recorded = errors.Join(done.Recorded, store.Fleet().RecordAction(ctx, a, driver.DefaultHistory()))
	}
	return m, done, nil
}
