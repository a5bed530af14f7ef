// Package scheduler turns a config into runs: it computes each task's ticks,
// fans a tick out over the task's entities, takes each entity's lease, runs
// the task's action under it, and carries out reschedules, retries, triggers
// and follow-ups from the durable due set. It writes its part of each
// tick's history and publishes the tasks' health as metrics.
//
// The config it runs is package config's (its file, schedules and store);
// reading what the ticks left is package history's.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
	"github.com/tickd/tickd/tasks"
)

// Causes of a run's cancellation, besides the lease's own: tasks' names,
// which a handler compares context.Cause with.
var (
	ErrTimeout  = tasks.ErrTimeout
	ErrShutdown = tasks.ErrShutdown
)

// Options configure a Scheduler.
type Options struct {
	Store    *lease.Store
	Logger   *slog.Logger
	Registry *tasks.Registry // Go handlers, for tasks with `handler`
	Clock    driver.Clock    // defaults to the system clock
	// DuePoll is how often the due set is polled. Defaults to 100ms.
	DuePoll time.Duration
	// PausePoll is how often paused tasks are read. Defaults to 500ms.
	PausePoll time.Duration
	// Metrics, if set, receives the scheduler's measurements.
	Metrics Metrics
	// HealthPoll is how often, with Metrics, the tasks' history is read for
	// their flags. Defaults to 15s.
	HealthPoll time.Duration
	// Observer, if set, is told of what the scheduler does (Event). It is
	// called synchronously, from many goroutines: keep it quick. Runs end
	// (EventRunEnded) once their leases are released, one after another for
	// a release batch: an Observer that blocks holds up the others' ends.
	Observer func(Event)
	// Tracer, if set, traces each tick's fan-out and each run
	// (internal/telemetry).
	Tracer *telemetry.Tracer
	// Version is tickd's, in the heartbeats' User-Agent.
	Version string
}

// Scheduler runs a config's tasks.
type Scheduler struct {
	store      *lease.Store
	tracer     *telemetry.Tracer
	log        *slog.Logger
	registry   *tasks.Registry
	clock      driver.Clock
	sysClock   bool // clock is the system's: its readings serve as wall time too (wall)
	replica    string
	duePoll    time.Duration
	pausePoll  time.Duration
	healthPoll time.Duration
	logLimit   *logs.Limiter // rate-limits lines about failures that repeat
	// registered is what the task registry was last told of this
	// replica's tasks, and when (the announce loop's).
	registered   string
	registeredAt time.Time
	// orphansPublished are the registry's tasks outside the config whose
	// health the last publishHealth published (the health loop's).
	orphansPublished map[string]bool
	metrics          Metrics // noMetrics when Options had none
	observer         func(Event)
	version          string

	mu    sync.Mutex
	cfg   *config.Config
	tasks map[string]*taskState
	// loopCtx is cancelled at shutdown: no new ticks or due runs start. The
	// loops and fan-outs under it are counted in loopWG.
	loopCtx   context.Context
	stopLoops context.CancelFunc
	loopWG    sync.WaitGroup
	// abort is cancelled (cause ErrShutdown) when shutdown_timeout ends:
	// the runs still going are stopped and handed over.
	abort     context.Context
	abortRuns context.CancelCauseFunc
	runs      sync.WaitGroup
	workers   workers
	started   bool
	active    atomic.Int64
	// quarantineEnd is when the data-loss quarantine last seen ends (Unix
	// ns): it is logged once.
	quarantineEnd atomic.Int64
	// dueWaiting counts the due entries waiting for a run slot (waitSlot);
	// lastStarvedTake is when the due loop last took one with no slot free.
	dueWaiting      atomic.Int32
	lastStarvedTake time.Time
	// history writes this replica's part of the history; historyDone is
	// closed when its writer has ended (after the runs, at shutdown).
	history     *historyWriter
	stopHistory context.CancelFunc
	historyDone chan struct{}
	beats       *beats // the heartbeats of tasks with a heartbeat_url
	backfills   *backfiller
	// liveFanOuts counts the live ticks' fan-outs under way, and
	// liveSince is when the latest began (Unix ns): a backfill yields to
	// them, for a while (liveSoon).
	liveFanOuts atomic.Int32
	liveSince   atomic.Int64
}

// taskState is one task's running state; a reload that changes the task
// replaces it, while runs started under the old one finish with it.
type taskState struct {
	t      config.Task
	action tasks.Action
	source tasks.Source
	slots  chan struct{}
	// releasing counts the runs whose handler returned and whose release
	// is on its way, their slots given back (at most cap(slots): execute).
	releasing          atomic.Int64
	stop               context.CancelFunc
	paused             atomic.Bool
	fanOuts            *fanOuts               // its fan-outs under way, which a pause stops; shared with its successors
	tickLog, noTickLog atomic.Pointer[runLog] // runLog's
	shardsSaid         atomic.Int64           // the recorded shard count last logged as differing from t's
	// tally is the task's last tick's tally, for a task under limits: its
	// runs that waited for a limit are counted in it when they run here.
	tally atomic.Pointer[tally]
	// next is the taskState a reload replaced this one with, and replaced
	// is closed then: a fan-out under way goes on under next (fanOut.follow)
	// rather than stop, so that no entity of its tick is dropped.
	next     atomic.Pointer[taskState]
	replaced chan struct{}
	// lastTick is the last tick fanned out (Unix ns), handed on to next: a
	// replaced task's tick loop does not catch up a tick already fanned out.
	lastTick atomic.Int64
	// zones, for a task with timezone_from, are the zones its entities
	// were found in, handed on to next; sched is its ticks' Schedule:
	// zones, or the task's own.
	zones *zoneSet
	sched schedule.Schedule
	// nextTick is the tick its tick loop waits for (Unix ns; 0: none).
	nextTick atomic.Int64
}

// New prepares a Scheduler for cfg; Start starts it.
func New(cfg *config.Config, opts Options) (*Scheduler, error) {
	if opts.Store == nil {
		return nil, errors.New("scheduler: no lease store")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = lease.SystemClock{}
	}
	if opts.DuePoll <= 0 {
		opts.DuePoll = 100 * time.Millisecond
	}
	if opts.PausePoll <= 0 {
		opts.PausePoll = 500 * time.Millisecond
	}
	if opts.HealthPoll <= 0 {
		opts.HealthPoll = 15 * time.Second
	}
	s := &Scheduler{
		store: opts.Store, log: opts.Logger.With(logs.KeyReplica, opts.Store.Replica()), registry: opts.Registry, clock: opts.Clock,
		replica: opts.Store.Replica(), duePoll: opts.DuePoll, pausePoll: opts.PausePoll, healthPoll: opts.HealthPoll,
		logLimit: logs.NewLimiter(logs.Every), tasks: map[string]*taskState{}, observer: opts.Observer,
		metrics: opts.Metrics, tracer: opts.Tracer, version: opts.Version,
	}
	_, s.sysClock = opts.Clock.(lease.SystemClock)
	if s.metrics == nil {
		s.metrics = noMetrics{}
	}
	s.loopCtx, s.stopLoops = context.WithCancel(context.Background())
	s.history, s.historyDone = newHistoryWriter(s), make(chan struct{})
	s.beats = newBeats(s)
	s.backfills = &backfiller{s: s, running: map[string]bool{}}
	s.workers = workers{s: s, run: s.execute, quit: s.loopCtx.Done(), all: map[*worker]struct{}{}}
	s.abort, s.abortRuns = context.WithCancelCause(context.Background())
	if err := s.checkHandlers(cfg); err != nil {
		return nil, err
	}
	// The data-loss quarantine must cover the longest lease in use.
	s.store.CoverTTL(cfg.MaxLeaseTTL())
	s.store.SetLimits(leaseconf.Limits(cfg))
	s.cfg = cfg
	return s, nil
}

// checkHandlers makes sure every `handler` task names a registered handler.
func (s *Scheduler) checkHandlers(cfg *config.Config) error {
	var errs []error
	for i, t := range cfg.Tasks {
		if t.Handler == "" {
			continue
		}
		if _, ok := s.registry.Lookup(t.Handler); !ok {
			errs = append(errs, &config.Error{File: cfg.Path, Key: fmt.Sprintf("tasks[%d].handler", i),
				Msg: fmt.Sprintf("no Go handler %q is registered in this binary (registered: %v)", t.Handler, s.registry.Names())})
		}
	}
	return errors.Join(errs...)
}

// Start starts the lease store (if not yet started), every task's ticks and
// the loops that poll the store: due requests, paused tasks and (with
// metrics) the due set's size. ctx bounds the start only: the scheduler
// runs until Stop. A second Start does nothing; Start after Stop returns
// ErrShutdown.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopCtx.Err() != nil {
		return ErrShutdown
	}
	if s.started {
		return nil
	}
	if err := s.store.Start(ctx); err != nil {
		return err
	}
	s.started = true
	for _, t := range s.cfg.Tasks {
		s.startTask(t, nil)
	}
	type loop struct {
		every time.Duration
		fn    func(context.Context)
	}
	loops := []loop{{s.duePoll, s.takeDue}, {s.pausePoll, s.readPaused}, {s.pausePoll, s.announce}, {backfillPoll, s.backfills.poll}}
	if _, none := s.metrics.(noMetrics); !none {
		loops = append(loops, loop{s.pausePoll, s.publishDueDepth}, loop{s.pausePoll, s.publishLimits}, loop{s.healthPoll, s.publishHealth})
	}
	for _, l := range loops {
		s.loopWG.Add(1)
		go func() { defer s.loopWG.Done(); poll(s.loopCtx, l.every, l.fn) }()
	}
	// The history's writer outlives the loops: the runs' ends are written
	// once the runs have ended (Shutdown).
	hctx, stop := context.WithCancel(context.Background())
	s.stopHistory = stop
	go func() { defer close(s.historyDone); s.history.loop(hctx) }()
	s.beats.start()
	go s.watchOverruns()
	return nil
}

// startTask starts one task's tick loop, in place of prev (a reload's
// change; nil for a new task); s.mu is held. prev's fan-outs under way go
// on under the new state, and its tick loop stops.
func (s *Scheduler) startTask(t config.Task, prev *taskState) {
	s.metrics.Task(t.Name)
	s.store.WantShards(t.Name, t.Shards)
	ts := &taskState{t: t, slots: make(chan struct{}, t.Concurrency), fanOuts: &fanOuts{}, replaced: make(chan struct{})}
	ts.action, ts.source = s.buildTask(t)
	if prev != nil {
		ts.source = keptSource(prev.source, ts.source)
	}
	ts.sched = t.Schedule
	if t.TimezoneFrom != "" {
		ts.zones = newZoneSet(t.Schedule)
		if prev != nil && prev.zones != nil {
			ts.zones.learn(prev.zones)
		}
		ts.sched = ts.zones
	}
	if prev != nil {
		ts.fanOuts = prev.fanOuts
		ts.paused.Store(prev.paused.Load())
		ts.lastTick.Store(prev.lastTick.Load())
		ts.tally.Store(prev.tally.Load())
		prev.next.Store(ts)
		close(prev.replaced)
		prev.stop()
	}
	if t.CatchUp > 0 {
		// A live tick may be caught up now: a backfill waits (liveSoon)
		// while the tick loop reads the missed ticks. Set here, not in the
		// loop's goroutine: a backfill resumed at start would otherwise
		// take a limit's room before the live tick's runs ask.
		ts.nextTick.Store(s.clock.Now().UnixNano())
	}
	ctx, cancel := context.WithCancel(s.loopCtx)
	ts.stop = cancel
	s.tasks[t.Name] = ts
	s.loopWG.Add(1)
	go func() { defer s.loopWG.Done(); s.tickLoop(ctx, ts) }()
}

func (s *Scheduler) buildTask(t config.Task) (tasks.Action, tasks.Source) {
	var a tasks.Action
	switch {
	case t.Command != nil:
		a = tasks.Exec{Argv: t.Command, RescheduleCode: t.RescheduleExitCode, Grace: Grace(t.LeaseTTL), KeepOutput: t.FailureOutput}
	case t.URL != "":
		a = tasks.HTTP{URL: t.URL, Headers: t.Headers, KeepBody: t.FailureOutput, Redirects: t.FollowRedirects}
	default:
		h, _ := s.registry.Lookup(t.Handler)
		a = h
	}
	return a, t.Source(s.log.With(logs.KeyTask, t.Name))
}

// keptSource is prev in place of next when both are the same endpoint: its
// last good list and ETag outlive a reload that left the endpoint as it
// was (the endpoint down at a reload does not leave the task without
// entities).
func keptSource(prev, next tasks.Source) tasks.Source {
	p, ok1 := prev.(*tasks.Endpoint)
	n, ok2 := next.(*tasks.Endpoint)
	if ok1 && ok2 && p.URL == n.URL && maps.Equal(p.Headers, n.Headers) && p.Timeout == n.Timeout &&
		p.MaxAge == n.MaxAge && p.MaxBytes == n.MaxBytes && p.MaxEntities == n.MaxEntities {
		return prev
	}
	return next
}

// Reload switches to cfg: added tasks start, removed ones stop ticking,
// changed ones restart with the new settings. Running runs are not
// disturbed; they finish under the settings they started with. A tick of
// a changed task being fanned out goes on under the new settings (no
// entity of it is dropped); a removed task's fan-out stops, and its tick's
// record counts the entities it did not come to as removed.
func (s *Scheduler) Reload(cfg *config.Config) error {
	if err := s.checkHandlers(cfg); err != nil {
		return err
	}
	s.store.CoverTTL(cfg.MaxLeaseTTL())
	s.store.SetLimits(leaseconf.Limits(cfg))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopCtx.Err() != nil {
		return ErrShutdown
	}
	newTasks := map[string]config.Task{}
	for _, t := range cfg.Tasks {
		newTasks[t.Name] = t
	}
	added, removed, changed := []string{}, []string{}, []string{} // [] in a JSON log line, not null
	for name, ts := range s.tasks {
		nt, ok := newTasks[name]
		switch {
		case !ok:
			ts.fanOuts.stopAll(errRemoved)
			ts.stop()
			delete(s.tasks, name)
			removed = append(removed, name)
		case !reflect.DeepEqual(ts.t, nt):
			s.startTask(nt, ts)
			changed = append(changed, name)
		}
	}
	for _, t := range cfg.Tasks {
		if _, ok := s.tasks[t.Name]; !ok {
			s.startTask(t, nil)
			added = append(added, t.Name)
		}
	}
	s.cfg = cfg
	sort.Strings(added)
	sort.Strings(removed)
	sort.Strings(changed)
	s.log.Info("config reloaded", "added", added, "removed", removed, "changed", changed)
	if len(removed) > 0 {
		msg := "tasks taken out of the config stay in the task registry: once no replica runs them they are flagged as not firing, until tickd forget says they are gone on purpose"
		if len(added) > 0 {
			msg += "; a renamed task is, to tickd, one gone and one new"
		}
		s.log.Warn(msg, "removed", removed, "added", added)
	}
	return nil
}

// Config returns the config in force.
func (s *Scheduler) Config() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Active is the number of runs going on.
func (s *Scheduler) Active() int { return int(s.active.Load()) }

// Stop stops new runs and waits for the running ones until ctx is done (the
// daemon's shutdown_timeout), then stops the rest and hands each over (a
// durable retry another replica takes), waits for them to end, and writes
// the history's last part. Each run releases its lease. Stop closes nothing
// it did not open: the store is the caller's to stop, after. A second Stop
// does nothing.
//
// Stop returns at most 2s after ctx is done (an exec run stopped then is
// waited for until its SIGKILL): a Go handler that does not honour its ctx
// is not waited for. Stop then returns ErrRunsGoOn, and logs each run still
// going at ERROR with its fence; its lease is released when it returns.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.loopCtx.Err() != nil {
		s.mu.Unlock()
		return nil
	}
	s.stopLoops()
	started := s.started
	s.mu.Unlock()
	s.loopWG.Wait()
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	if started {
		defer func() { s.stopHistory(); <-s.historyDone; s.beats.finish() }() // a last write, of at most 2s; a last judging of the heartbeats, of at most about 4s
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.log.Warn("shutdown timeout reached: stopping runs and handing them over", "runs", s.Active(), "cause", context.Cause(ctx).Error())
	s.abortRuns(ErrShutdown)
	s.workers.abort(ErrShutdown)
	wait := time.NewTimer(s.workers.stopWait())
	defer wait.Stop()
	select {
	case <-done:
		return nil
	case <-wait.C:
	}
	n := s.workers.overruns(time.Now(), true)
	return fmt.Errorf("%w: %d", ErrRunsGoOn, n)
}
