package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/registry"
	"github.com/tickd/tickd/lease/driver"
)

// TaskStatus is what status reads of one task: the first -limit rows of
// each section, and complete counts.
type TaskStatus struct {
	Name       string
	Schedule   string
	Timezone   string
	NextTick   time.Time
	Paused     bool
	Pause      driver.PauseInfo // who, why, until when, when Paused
	Health     history.Health
	FlagAfter  int
	LastTick   *history.TickView // the newest tick recorded or missed
	Leases     []driver.Held
	LeaseCount int
	LastRuns   []driver.LastRun
	RunCount   int
	Due        []driver.Due
	DueCount   int
	// DuePartial says the walk of the pending runs stopped at the scan
	// bound: DueCount is of those looked at, a lower bound.
	DuePartial bool
	// Scanned is how many entities were looked at; Partial says the walk
	// stopped at the scan bound before the last one (the counts are then
	// of those looked at).
	Scanned int
	Partial bool
	// Unlisted is, for a task the config does not list but the task
	// registry remembers, what the registry keeps of it; nil otherwise.
	Unlisted *driver.TaskInfo
	// Shards is the shard count recorded in Redis, the one in force;
	// ConfigShards what the config says.
	Shards, ConfigShards int
	// Resharding says, while tickd migrate moves the task, from and to
	// what ("" otherwise): Shards is then the config's, and its entities
	// are not read.
	Resharding string
}

// StatusScan is how many entities status looks at per task unless told to
// walk them all: the leases and last runs it shows and counts are among
// those, so that a status of a task of 1,000,000 entities costs what one
// of 2,000 does (3.7 ms of Redis CPU, BenchmarkPageView1M/api-status). The
// latest tick's counts come from its record, whole.
const StatusScan = 2000

// readShards reads the task's recorded shard count into st, or, while
// tickd migrate moves it, says so (Resharding) with the config's count:
// one task moving does not keep the others' status from being read, and
// its own entities are read once it has moved.
func (st *TaskStatus) readShards(ctx context.Context, store *lease.Store) error {
	counts, err := store.Fleet().RecordedShards(ctx, []string{st.Name})
	switch {
	case errors.Is(err, driver.ErrResharding):
		st.Resharding, st.Shards = err.Error(), st.ConfigShards
		return nil
	case err != nil:
		return fmt.Errorf("read the shard count: %w", err)
	}
	st.Shards = counts[st.Name]
	if st.Shards == 0 { // none recorded yet: the first tick records the config's
		st.Shards = st.ConfigShards
	}
	return nil
}

// StatusOf reads one task's state with bounded memory: one walk of its
// entities, a page at a time, of at most scan entities (0: all of them),
// keeping the first limit leases, the limit most recent last runs and the
// first limit due entries, and counting what it saw.
func StatusOf(ctx context.Context, store *lease.Store, t config.Task, now time.Time, limit, scan int, outcome string) (TaskStatus, error) {
	st := TaskStatus{Name: t.Name, NextTick: t.Schedule.Next(now), Schedule: t.ScheduleText(), Timezone: t.Location.String(),
		ConfigShards: max(t.Shards, 1)}
	if err := st.readShards(ctx, store); err != nil || st.Resharding != "" {
		return st, err
	}
	leases, runs, due := firstN[driver.Held](limit), firstN[driver.LastRun](limit), firstN[driver.Due](limit)
	// The limit most recent last runs: a new run replaces the oldest kept.
	runs.full = func(r driver.LastRun) {
		oldest := 0
		for i, x := range runs.items {
			if x.Ended.Before(runs.items[oldest].Ended) {
				oldest = i
			}
		}
		if r.Ended.After(runs.items[oldest].Ended) {
			runs.items[oldest] = r
		}
	}
	q := driver.PageQuery{Size: statusPage, MaxScan: statusPage}
	for {
		p, err := store.Fleet().EntityPage(ctx, t.Name, q)
		if err != nil {
			return st, fmt.Errorf("list the entities: %w", err)
		}
		for _, row := range p.Rows {
			if row.Held != nil {
				leases.add(*row.Held) //nolint:errcheck // never fails
			}
			if r := row.Last; r != nil && (outcome == "" || r.Outcome == driver.Outcome(outcome)) {
				runs.add(*r) //nolint:errcheck // never fails
			}
		}
		st.Scanned += len(p.Rows) // without a search, every entity looked at is a row
		if q.Cursor = p.Next; q.Cursor == "" {
			break
		}
		if scan > 0 && st.Scanned >= scan {
			st.Partial = true
			break
		}
	}
	// The pending runs, as many as the entities: at most scan of them
	// looked at (a trigger -force of 200,000 entities leaves as many while
	// they drain: walking them cost 300 ms of Redis CPU).
	errEnough := errors.New("enough pending runs looked at")
	err := store.Fleet().DueEntries(ctx, t.Name, func(d driver.Due) error {
		due.add(d) //nolint:errcheck // never fails
		if scan > 0 && due.count >= scan {
			st.DuePartial = true
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return st, fmt.Errorf("list due entries: %w", err)
	}
	SortRuns(runs.items)
	st.Leases, st.LeaseCount = leases.items, leases.count
	st.LastRuns, st.RunCount = runs.items, runs.count
	st.Due, st.DueCount = due.items, due.count
	return st, nil
}

// statusPage is how many entities a status reads a round trip.
const statusPage = 1000

// Assess reads the task's newest ticks and actions for its flags and its
// last tick.
func (st *TaskStatus) Assess(ctx context.Context, store *lease.Store, t *config.Task, replicas []driver.Replica, now time.Time) error {
	ps, err := history.ReadPasts(ctx, store, []*config.Task{t}, 0, history.RecentActions, map[string]driver.PauseInfo{}, replicas)
	if err != nil {
		return err
	}
	p := ps[0]
	p.Paused = st.Paused
	views, h := history.Assess(t, now, p)
	if st.Unlisted != nil {
		views, h = history.AssessOrphan(&registry.Orphan{Task: *t, Info: *st.Unlisted}, now, p)
	}
	st.Health, st.FlagAfter = h, t.FlagAfter
	if len(views) > 0 {
		st.LastTick = &views[0]
	}
	return nil
}

// bounded counts what it is given and keeps the first limit items; full,
// if set, sees each item that comes once limit are kept.
type bounded[T any] struct {
	limit int
	count int
	items []T
	full  func(T)
}

func firstN[T any](limit int) *bounded[T] { return &bounded[T]{limit: limit, items: []T{}} }

func (b *bounded[T]) add(x T) error {
	b.count++
	switch {
	case len(b.items) < b.limit:
		b.items = append(b.items, x)
	case b.full != nil:
		b.full(x)
	}
	return nil
}

// SortRuns puts the most recent runs first.
func SortRuns(rs []driver.LastRun) {
	slices.SortStableFunc(rs, func(a, b driver.LastRun) int { return b.Ended.Compare(a.Ended) })
}

// Status is what `tickd status` reads: the Redis replication, the running
// replicas, and each task's status.
type Status struct {
	Replication driver.Replication
	Replicas    []driver.Replica
	Tasks       []TaskStatus
	// Locks are the keys tickd lock holds now (its leases, under LockTask),
	// the first limit; LockCount counts them all.
	Locks     []driver.Held
	LockCount int
	Limits    []LimitStatus
	Backfills []driver.Backfill // newest first
	Now       time.Time
}

// LockTask is the task name under which tickd lock's keys live; config
// task names cannot start with '@', so they never collide.
const LockTask = "@lock"

// ReadStatus reads the status of cfg's tasks (only one, if only is not
// ""), at most limit rows a section from at most scan entities a task (0:
// every entity), the last runs filtered by outcome when it is not "".
func ReadStatus(ctx context.Context, store *lease.Store, cfg *config.Config, only string, limit, scan int, outcome string, now time.Time) (Status, error) {
	st := Status{Now: now}
	pauses, err := store.Fleet().Pauses(ctx)
	if err != nil {
		return st, fmt.Errorf("read paused tasks: %w", err)
	}
	if st.Replication, err = store.Fleet().Replication(ctx); err != nil {
		return st, fmt.Errorf("read replication: %w", err)
	}
	if st.Replicas, err = store.Fleet().Replicas(ctx); err != nil {
		return st, err
	}
	reg, err := store.Fleet().Registry(ctx)
	if err != nil {
		return st, err
	}
	locks := firstN[driver.Held](limit)
	if err := store.Fleet().Leases(ctx, LockTask, locks.add); err != nil {
		return st, fmt.Errorf("list locks: %w", err)
	}
	st.Locks, st.LockCount = locks.items, locks.count
	if st.Limits, err = ReadLimits(ctx, store, cfg); err != nil {
		return st, err
	}
	if st.Backfills, err = ReadBackfills(ctx, store, only); err != nil {
		return st, err
	}
	type one struct {
		t        config.Task
		unlisted *driver.TaskInfo
	}
	all := make([]one, 0, len(cfg.Tasks))
	for _, t := range cfg.Tasks {
		all = append(all, one{t: t})
	}
	for _, o := range registry.Orphans(cfg, reg) {
		all = append(all, one{t: o.Task, unlisted: &o.Info})
	}
	for _, o := range all {
		t := o.t
		if only != "" && t.Name != only {
			continue
		}
		ts, err := StatusOf(ctx, store, t, now, limit, scan, outcome)
		if err != nil {
			return st, err
		}
		p, paused := pauses[t.Name]
		ts.Paused, ts.Pause, ts.Unlisted = paused, p, o.unlisted
		if err := ts.Assess(ctx, store, &t, st.Replicas, now); err != nil {
			return st, err
		}
		st.Tasks = append(st.Tasks, ts)
	}
	return st, nil
}

// Doc is the status as `tickd status -json` prints it.
func (st Status) Doc() StatusDoc {
	doc := StatusDoc{Replication: ReplicationDocOf(st.Replication), Replicas: ReplicaDocs(st.Replicas), Tasks: []TaskDoc{},
		Locks: []LeaseDoc{}, LockCount: st.LockCount, Limits: []LimitDoc{}, Backfills: []BackfillDoc{}}
	for _, b := range st.Backfills {
		doc.Backfills = append(doc.Backfills, BackfillDocOf(b, st.Now))
	}
	for _, l := range st.Limits {
		doc.Limits = append(doc.Limits, l.Doc())
	}
	for _, ts := range st.Tasks {
		doc.Tasks = append(doc.Tasks, ts.Doc(st.Now))
	}
	for _, h := range st.Locks {
		doc.Locks = append(doc.Locks, leaseDoc(h, st.Now))
	}
	return doc
}
