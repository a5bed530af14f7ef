// Package scheduler turns a config into runs: it computes each task's ticks,
// fans a tick out over the task's entities, takes each entity's lease, runs
// the task's action under it, and carries out reschedules, retries, triggers
// and follow-ups from the durable due set.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/tasks"
)

// Causes of a run's cancellation, besides the lease's own.
var (
	ErrTimeout  = errors.New("scheduler: run timed out")
	ErrShutdown = errors.New("scheduler: shutting down")
)

// Options configure a Scheduler.
type Options struct {
	Store    *lease.Store
	Logger   *slog.Logger
	Registry *tasks.Registry // Go handlers, for tasks with `handler`
	Clock    lease.Clock     // defaults to the system clock
	// DuePoll is how often the due set is polled. Defaults to 100ms.
	DuePoll time.Duration
	// PausePoll is how often paused tasks are read. Defaults to 500ms.
	PausePoll time.Duration
	// Metrics, if set, receives the scheduler's measurements.
	Metrics *Metrics
}

type sysClock struct{}

func (sysClock) Now() time.Time { return time.Now() }

// Scheduler runs a config's tasks.
type Scheduler struct {
	store    *lease.Store
	log      *slog.Logger
	registry *tasks.Registry
	clock    lease.Clock
	replica  string
	duePoll  time.Duration
	pollP    time.Duration
	limit    *limiter
	metrics  *Metrics

	mu     sync.Mutex
	cfg    *Config
	tasks  map[string]*taskState
	loops  context.Context // cancelled at shutdown: no new ticks or due runs
	stopLo context.CancelFunc
	// kill is cancelled (ErrShutdown) when shutdown_timeout ends.
	kill     context.Context
	killRuns context.CancelCauseFunc
	runs     sync.WaitGroup
	loopsWG  sync.WaitGroup
	started  bool
	active   atomic.Int64
}

// taskState is one task's running state; a reload that changes the task
// replaces it, while runs started under the old one finish with it.
type taskState struct {
	t      Task
	action tasks.Action
	source tasks.Source
	slots  chan struct{}
	stop   context.CancelFunc
	paused atomic.Bool
}

// New prepares a Scheduler for cfg; Start starts it.
func New(cfg *Config, opts Options) (*Scheduler, error) {
	if opts.Store == nil {
		return nil, errors.New("scheduler: no lease store")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = sysClock{}
	}
	if opts.DuePoll <= 0 {
		opts.DuePoll = 100 * time.Millisecond
	}
	if opts.PausePoll <= 0 {
		opts.PausePoll = 500 * time.Millisecond
	}
	s := &Scheduler{
		store: opts.Store, log: opts.Logger.With(KeyReplica, opts.Store.Replica()), registry: opts.Registry, clock: opts.Clock,
		replica: opts.Store.Replica(), duePoll: opts.DuePoll, pollP: opts.PausePoll,
		limit: newLimiter(10 * time.Second), tasks: map[string]*taskState{}, metrics: opts.Metrics,
	}
	s.loops, s.stopLo = context.WithCancel(context.Background())
	s.kill, s.killRuns = context.WithCancelCause(context.Background())
	if err := s.checkHandlers(cfg); err != nil {
		return nil, err
	}
	s.cfg = cfg
	return s, nil
}

// checkHandlers makes sure every `handler` task names a registered handler.
func (s *Scheduler) checkHandlers(cfg *Config) error {
	var errs []error
	for i, t := range cfg.Tasks {
		if t.Handler == "" {
			continue
		}
		if _, ok := s.registry.Lookup(t.Handler); !ok {
			errs = append(errs, &ConfigError{File: cfg.Path, Key: fmt.Sprintf("tasks[%d].handler", i),
				Msg: fmt.Sprintf("no Go handler %q is registered in this binary (registered: %v)", t.Handler, s.registry.Names())})
		}
	}
	return errors.Join(errs...)
}

// Start starts every task's ticks, the due loop and the pause poller.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	for _, t := range s.cfg.Tasks {
		s.startTask(t)
	}
	s.loopsWG.Add(2)
	go func() { defer s.loopsWG.Done(); s.dueLoop(s.loops) }()
	go func() { defer s.loopsWG.Done(); s.pauseLoop(s.loops) }()
}

// startTask starts one task's tick loop; s.mu is held.
func (s *Scheduler) startTask(t Task) {
	ts := &taskState{t: t, slots: make(chan struct{}, t.Concurrency)}
	ts.action, ts.source = s.buildTask(t)
	ctx, cancel := context.WithCancel(s.loops)
	ts.stop = cancel
	s.tasks[t.Name] = ts
	s.loopsWG.Add(1)
	go func() { defer s.loopsWG.Done(); s.tickLoop(ctx, ts) }()
}

func (s *Scheduler) buildTask(t Task) (tasks.Action, tasks.Source) {
	var a tasks.Action
	switch {
	case t.Command != nil:
		a = tasks.Exec{Argv: t.Command, RescheduleCode: t.RescheduleExitCode, Grace: Grace(t.LeaseTTL)}
	case t.URL != "":
		a = tasks.HTTP{URL: t.URL}
	default:
		h, _ := s.registry.Lookup(t.Handler)
		a = tasks.HandlerFunc(h)
	}
	return a, t.Source(s.log.With(KeyTask, t.Name))
}

// Grace is how long a stopped exec run has between SIGTERM and SIGKILL:
// half the lease's safety margin (at most 10s), so that a run stopped at the
// end of its trust window is dead before the lease can expire.
func Grace(ttl time.Duration) time.Duration { return min(10*time.Second, lease.Margin(ttl)/2) }

// Reload switches to cfg: added tasks start, removed ones stop ticking,
// changed ones restart with the new settings. Running runs are not
// disturbed; they finish under the settings they started with.
func (s *Scheduler) Reload(cfg *Config) error {
	if err := s.checkHandlers(cfg); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loops.Err() != nil {
		return ErrShutdown
	}
	if !reflect.DeepEqual(s.cfg.Redis, cfg.Redis) {
		s.log.Warn("the [redis] table changed: restart tickd to use it")
	}
	newTasks := map[string]Task{}
	for _, t := range cfg.Tasks {
		newTasks[t.Name] = t
	}
	var added, removed, changed []string
	for name, ts := range s.tasks {
		nt, ok := newTasks[name]
		switch {
		case !ok:
			ts.stop()
			delete(s.tasks, name)
			removed = append(removed, name)
		case !reflect.DeepEqual(ts.t, nt):
			ts.stop()
			paused := ts.paused.Load()
			s.startTask(nt)
			s.tasks[name].paused.Store(paused)
			changed = append(changed, name)
		}
	}
	for _, t := range cfg.Tasks {
		if _, ok := s.tasks[t.Name]; !ok {
			s.startTask(t)
			added = append(added, t.Name)
		}
	}
	s.cfg = cfg
	sort.Strings(added)
	sort.Strings(removed)
	sort.Strings(changed)
	s.log.Info("config reloaded", "added", added, "removed", removed, "changed", changed)
	return nil
}

// Config returns the config in force.
func (s *Scheduler) Config() *Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Active is the number of runs going on.
func (s *Scheduler) Active() int { return int(s.active.Load()) }

// Shutdown stops new runs, waits up to timeout for running ones, then stops
// the rest and hands each over (a durable retry another replica takes),
// releases every lease and closes nothing it did not open.
func (s *Scheduler) Shutdown(timeout time.Duration) {
	s.mu.Lock()
	s.stopLo()
	s.mu.Unlock()
	s.loopsWG.Wait()
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	n := s.Active()
	s.log.Warn("shutdown timeout reached: stopping runs and handing them over", "runs", n, "shutdown_timeout", timeout)
	s.killRuns(ErrShutdown)
	<-done
}

// tickLoop waits for each tick of a task and fans it out. Ticks are computed
// from the previous planned tick, never from now.
func (s *Scheduler) tickLoop(ctx context.Context, ts *taskState) {
	t := ts.t
	now := s.clock.Now()
	if t.CatchUp > 0 {
		if prev := Prev(t.Schedule, now, t.CatchUp); !prev.IsZero() {
			s.log.Info("catching up the latest missed tick", KeyTask, t.Name, tickAttr(prev))
			s.goFanOut(ctx, ts, prev)
		}
	}
	next := t.Schedule.Next(now)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !next.IsZero() {
		timer.Reset(next.Sub(s.clock.Now()))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now = s.clock.Now()
		if now.Before(next) { // the timer fired early against an offset clock
			continue
		}
		// Woken late (a pause, a frozen process): run the latest tick due, not
		// a flood of old ones, and only if it is young enough.
		skipped := 0
		for n := t.Schedule.Next(next); !n.IsZero() && !n.After(now); n = t.Schedule.Next(n) {
			next = n
			skipped++
		}
		if skipped > 0 {
			s.log.Warn("ticks missed while the process was late", KeyTask, t.Name, "skipped", skipped, tickAttr(next))
		}
		if late := now.Sub(next); late <= t.LateLimit() {
			if !ts.paused.Load() {
				s.goFanOut(ctx, ts, next)
			} else {
				s.metrics.skip(t.Name, "paused", 1)
				s.log.Debug("task paused: tick skipped", KeyTask, t.Name, tickAttr(next))
			}
		} else {
			s.log.Warn("tick too late to run", KeyTask, t.Name, tickAttr(next), "late", late)
		}
		next = t.Schedule.Next(next)
	}
}

// goFanOut fans out in the background; Shutdown waits for it (the tick
// loop that calls it is itself counted, so the count never touches zero).
func (s *Scheduler) goFanOut(ctx context.Context, ts *taskState, T time.Time) {
	s.loopsWG.Add(1)
	go func() { defer s.loopsWG.Done(); s.fanOut(ctx, ts, T) }()
}

// fanOut reads the task's entities and tries their leases for tick T, in
// batches only as large as the free run slots, so a busy replica leaves
// entities to idle ones.
func (s *Scheduler) fanOut(ctx context.Context, ts *taskState, T time.Time) {
	t := ts.t
	var started, busy, ran, failed, total int
	var batch []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		reqs := make([]lease.Request, len(batch))
		for i, id := range batch {
			reqs[i] = lease.Request{Task: t.Name, Entity: id, TTL: t.LeaseTTL, Reason: lease.ReasonTick, Tick: T, Queue: t.OnBusy == OnBusyQueue}
		}
		res := s.acquireRetrying(ctx, ts, T, reqs)
		for i, r := range res {
			switch {
			case r.Err == nil:
				started++
				s.start(ts, r.Lease)
				continue
			case errors.Is(r.Err, lease.ErrBusy):
				busy++
				s.log.Debug("entity busy: skipped", KeyTask, t.Name, KeyEntity, batch[i], tickAttr(T), KeyError, r.Err)
			case errors.Is(r.Err, lease.ErrAlreadyRan):
				ran++
				s.log.Debug("tick already ran for entity", KeyTask, t.Name, KeyEntity, batch[i], tickAttr(T))
			default:
				failed++
			}
			<-ts.slots
		}
		batch = batch[:0]
	}
	reserve := func() bool {
		select {
		case ts.slots <- struct{}{}:
			return true
		default:
		}
		flush() // before waiting: the batch may free slots
		select {
		case ts.slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	each := func(id string) error {
		total++
		if !reserve() {
			return context.Cause(ctx)
		}
		batch = append(batch, id)
		if len(batch) >= lease.BatchSize {
			flush()
		}
		return nil
	}
	var err error
	if t.Spread > 0 {
		err = s.spreadOut(ctx, ts, T, each, flush)
	} else {
		err = ts.source.Each(ctx, each)
	}
	flush()
	if err != nil && ctx.Err() == nil {
		s.log.Error("entity source failed", KeyTask, t.Name, tickAttr(T), KeyError, err)
	}
	s.metrics.tick(t.Name, total)
	s.metrics.skip(t.Name, "busy", busy)
	s.metrics.skip(t.Name, "already_ran", ran)
	lvl := slog.LevelInfo
	if failed > 0 {
		lvl = slog.LevelWarn
	}
	s.log.Log(context.Background(), lvl, "tick", KeyTask, t.Name, tickAttr(T),
		"entities", total, "started", started, "busy", busy, "already_ran", ran, "errors", failed)
}

// spreadOut feeds entities in the order of their spread offsets, each at
// T + offset. It reads the whole source first.
func (s *Scheduler) spreadOut(ctx context.Context, ts *taskState, T time.Time, each func(string) error, flush func()) error {
	type item struct {
		id  string
		off time.Duration
	}
	var items []item
	if err := ts.source.Each(ctx, func(id string) error {
		items = append(items, item{id, SpreadOffset(ts.t.Name, id, ts.t.Spread)})
		return nil
	}); err != nil {
		return err
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].off < items[j].off })
	for _, it := range items {
		if d := T.Add(it.off).Sub(s.clock.Now()); d > 0 {
			flush()
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(d):
			}
		}
		if err := each(it.id); err != nil {
			return err
		}
	}
	return nil
}

// acquireRetrying acquires a batch; while Redis fails, it retries with
// backoff as long as the tick may still run (the catch-up window, at least
// 10s). Requests still failing are returned with their errors.
func (s *Scheduler) acquireRetrying(ctx context.Context, ts *taskState, T time.Time, reqs []lease.Request) []lease.Result {
	res := s.store.AcquireBatch(ctx, reqs)
	backoff := 100 * time.Millisecond
	for {
		// Busy and already-ran are answers; anything else is retried.
		var pending []int
		var early, failed error
		wait := backoff
		for i, r := range res {
			var ee *lease.EarlyError
			switch {
			case r.Err == nil, errors.Is(r.Err, lease.ErrBusy), errors.Is(r.Err, lease.ErrAlreadyRan):
				continue
			case errors.As(r.Err, &ee):
				// This clock runs ahead of Redis's: wait for the tick.
				early = r.Err
				wait = max(wait, min(ee.Wait, 2*time.Second))
			default:
				failed = r.Err
			}
			pending = append(pending, i)
		}
		if early != nil {
			s.logLimited("early:"+ts.t.Name, "tick not yet due by Redis's clock: is this host's clock ahead?", KeyTask, ts.t.Name, tickAttr(T), KeyError, early)
		}
		if failed != nil {
			s.metrics.RedisError()
			s.logLimited("acquire:"+ts.t.Name, "cannot acquire leases; retrying", KeyTask, ts.t.Name, tickAttr(T), KeyError, failed)
		}
		if len(pending) == 0 || s.clock.Now().Sub(T) > ts.t.LateLimit() {
			return res
		}
		select {
		case <-ctx.Done():
			return res
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 2*time.Second)
		retry := make([]lease.Request, len(pending))
		for j, i := range pending {
			retry[j] = reqs[i]
		}
		for j, r := range s.store.AcquireBatch(ctx, retry) {
			res[pending[j]] = r
		}
	}
}

// pauseLoop reads the paused tasks so that every replica stops or resumes
// ticking a task within PausePoll.
func (s *Scheduler) pauseLoop(ctx context.Context) {
	t := time.NewTicker(s.pollP)
	defer t.Stop()
	for {
		if s.metrics != nil {
			if n, err := s.store.DueCount(ctx); err == nil {
				s.metrics.due(n)
			}
		}
		paused, err := s.store.Paused(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.logLimited("paused", "cannot read paused tasks", KeyError, err)
			}
		} else {
			s.mu.Lock()
			for name, ts := range s.tasks {
				if was := ts.paused.Swap(paused[name]); was != paused[name] {
					s.log.Info(map[bool]string{true: "task paused", false: "task resumed"}[paused[name]], KeyTask, name)
				}
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dueLoop carries out durable requests: reschedules, retries, triggers and
// follow-ups, from this replica or any other.
func (s *Scheduler) dueLoop(ctx context.Context) {
	t := time.NewTicker(s.duePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.takeDue(ctx)
	}
}

// dueVisibility is how long a taken due entry stays hidden before it comes
// back: it only has to cover the moment between taking it and acquiring.
const dueVisibility = 30 * time.Second

func (s *Scheduler) takeDue(ctx context.Context) {
	s.mu.Lock()
	free := 0
	for _, ts := range s.tasks {
		if !ts.paused.Load() {
			free += cap(ts.slots) - len(ts.slots)
		}
	}
	s.mu.Unlock()
	if free == 0 {
		return
	}
	ds, err := s.store.TakeDue(ctx, min(free, 64), dueVisibility)
	if err != nil {
		if ctx.Err() == nil {
			s.logLimited("take", "cannot read due runs", KeyError, err)
		}
		return
	}
	for _, d := range ds {
		s.mu.Lock()
		ts := s.tasks[d.Task]
		s.mu.Unlock()
		if ts == nil {
			s.log.Warn("due run for a task not in the config: dropped", KeyTask, d.Task, KeyEntity, d.Entity, KeyReason, d.Reason)
			s.store.Ack(ctx, d) //nolint:errcheck // it comes back if this fails
			continue
		}
		ok := !ts.paused.Load()
		if ok {
			select {
			case ts.slots <- struct{}{}:
			default:
				ok = false
			}
		}
		if !ok { // no slot (or paused): give it back to be taken again soon
			if err := s.store.Enqueue(ctx, d, time.Second); err != nil {
				s.logLimited("enqueue", "cannot give back a due run", KeyError, err)
			}
			continue
		}
		queue := d.Reason != lease.ReasonTrigger || ts.t.OnBusy == OnBusyQueue
		l, err := s.store.Acquire(ctx, lease.Request{Task: d.Task, Entity: d.Entity, TTL: ts.t.LeaseTTL, Reason: d.Reason, Queue: queue, From: &d})
		if err != nil {
			<-ts.slots
			switch {
			case errors.Is(err, lease.ErrBusy):
				s.log.Debug("due run found the entity busy", KeyTask, d.Task, KeyEntity, d.Entity, KeyReason, d.Reason, "follow_up", queue)
			default:
				// Redis trouble or quarantine: give the entry back to be taken
				// again soon, rather than waiting out its visibility timeout.
				s.metrics.RedisError()
				s.logLimited("acquire-due", "cannot acquire lease for a due run; retrying", KeyTask, d.Task, KeyError, err)
				s.store.Enqueue(ctx, d, time.Second) //nolint:errcheck // if this fails too, visibility brings it back
			}
			continue
		}
		if l.Tick.IsZero() {
			l.Tick = d.At
		}
		s.start(ts, l)
	}
}

// start runs l's run in its own goroutine; the caller holds a slot of ts,
// which the run gives back.
func (s *Scheduler) start(ts *taskState, l *lease.Lease) {
	s.runs.Add(1)
	s.metrics.active(s.active.Add(1))
	go func() {
		defer s.runs.Done()
		defer func() { s.metrics.active(s.active.Add(-1)) }()
		defer func() { <-ts.slots }()
		s.execute(ts, l)
	}()
}

func (s *Scheduler) execute(ts *taskState, l *lease.Lease) {
	t := ts.t
	log := s.log.With(KeyTask, t.Name, KeyEntity, l.Entity, tickAttr(l.Tick), KeyFence, l.Fence,
		KeyReason, string(l.Reason))
	ctx, cancel := context.WithCancelCause(l.Context())
	defer cancel(nil)
	stopKill := context.AfterFunc(s.kill, func() { cancel(context.Cause(s.kill)) })
	defer stopKill()
	ctx, cancelT := context.WithTimeoutCause(ctx, t.Timeout, ErrTimeout)
	defer cancelT()
	if t.WarnAfter > 0 {
		w := time.AfterFunc(t.WarnAfter, func() {
			log.Warn("run still going", "running_for", t.WarnAfter, "timeout", t.Timeout)
		})
		defer w.Stop()
	}
	started := s.clock.Now()
	if l.Reason == lease.ReasonTick {
		s.metrics.lag(t.Name, started.Sub(l.Tick))
	}
	log.Info("run started", "attempt", l.Attempt)
	res, err := ts.action.Do(ctx, tasks.Run{Task: t.Name, Entity: l.Entity, Tick: l.Tick, Fence: l.Fence,
		Reason: string(l.Reason), Attempt: l.Attempt, Logger: log, Check: l.Check})
	ended := s.clock.Now()
	outcome := lease.OutcomeDone
	switch cause := context.Cause(ctx); {
	case err == nil && res == tasks.Reschedule:
		outcome = lease.OutcomeReschedule
	case err == nil:
	case errors.Is(cause, ErrTimeout):
		outcome = lease.OutcomeTimeout
	case errors.Is(cause, lease.ErrLost), errors.Is(cause, lease.ErrUntrusted):
		outcome = lease.OutcomeLeaseLost
	case errors.Is(cause, ErrShutdown):
		outcome = lease.OutcomeCanceled
	default:
		outcome = lease.OutcomeFailed
	}
	next := s.nextFor(t, l, outcome)
	// A run that never began (its lease was no longer trusted when it was to
	// start: the replica was frozen or slowed past the trust window) is
	// handed over whole, like one interrupted by shutdown: its tick is
	// recorded as started, so only a hand-over gets it done.
	handOver := outcome == lease.OutcomeCanceled || errors.Is(err, tasks.ErrNotStarted)
	if handOver {
		next = &lease.Next{Reason: lease.ReasonRetry, Attempt: l.Attempt}
	}
	s.metrics.run(t.Name, l.Reason, outcome, ended.Sub(started))
	if next != nil && next.Reason == lease.ReasonRetry && !handOver {
		s.metrics.retry(t.Name)
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), lease.ReleaseTimeout)
	defer rcancel()
	_, rerr := l.Release(rctx, lease.Finished{Outcome: outcome, Started: started, Ended: ended}, next)
	attrs := []any{KeyOutcome, outcome, KeyDuration, ended.Sub(started).Round(time.Millisecond).String()}
	if err != nil {
		attrs = append(attrs, KeyError, err.Error())
	}
	if next != nil {
		attrs = append(attrs, "next", string(next.Reason), "next_in", next.Delay.String())
	}
	switch outcome {
	case lease.OutcomeDone, lease.OutcomeReschedule:
		log.Info("run ended", attrs...)
	default:
		log.Warn("run ended", attrs...)
	}
	if rerr != nil && outcome != lease.OutcomeLeaseLost {
		log.Warn("release failed", KeyError, rerr)
	}
	if rerr != nil && next != nil { // keep the request: another replica must carry it out
		s.enqueueRetrying(t, l, *next)
	}
}

// nextFor decides what comes after a run.
func (s *Scheduler) nextFor(t Task, l *lease.Lease, outcome lease.Outcome) *lease.Next {
	switch outcome {
	case lease.OutcomeReschedule:
		n := 1
		if l.Reason == lease.ReasonReschedule {
			n = l.Attempt + 1
		}
		if n > t.MaxReschedules {
			s.log.Warn("max_reschedules reached: waiting for the next tick", KeyTask, t.Name, KeyEntity, l.Entity, "max_reschedules", t.MaxReschedules)
			return nil
		}
		return &lease.Next{Reason: lease.ReasonReschedule, Delay: t.RescheduleDelay, Attempt: n}
	case lease.OutcomeFailed, lease.OutcomeTimeout:
		n := 1
		if l.Reason == lease.ReasonRetry {
			n = l.Attempt + 1
		}
		if n > t.Retries {
			return nil
		}
		return &lease.Next{Reason: lease.ReasonRetry, Delay: Backoff(n), Attempt: n}
	}
	return nil
}

// Backoff is the delay before retry n (1, 2, …): exponential from 1s,
// capped at 5m, with ±20% jitter.
func Backoff(n int) time.Duration {
	d := time.Second << min(n-1, 9)
	d = min(d, 5*time.Minute)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// enqueueRetrying stores a request whose release failed (Redis down),
// retrying until Redis answers or the process stops.
func (s *Scheduler) enqueueRetrying(t Task, l *lease.Lease, n lease.Next) {
	d := lease.Due{Task: t.Name, Entity: l.Entity, Reason: n.Reason, Attempt: n.Attempt, Tick: l.Tick}
	backoff := 200 * time.Millisecond
	deadline := time.Now().Add(max(t.LeaseTTL, 30*time.Second))
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.store.Enqueue(ctx, d, n.Delay)
		cancel()
		if err == nil {
			return
		}
		s.logLimited("enqueue", "cannot store a follow-up request; retrying", KeyTask, t.Name, KeyError, err)
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
	s.log.Error("follow-up request lost: Redis unreachable", KeyTask, t.Name, KeyEntity, l.Entity, KeyReason, string(n.Reason))
}
