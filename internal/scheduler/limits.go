package scheduler

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// waitForLimit turns a run a limit had no room for into a due run, as it
// was asked for (a tick's run keeps its tick), due when the limit may have
// room: the run is not skipped, and not counted as failed. A tick's run
// supersedes the entity's run of an older tick waiting still (or is
// superseded by a newer one's), and the older tick's record says so.
func (s *Scheduler) waitForLimit(ctx context.Context, ts *taskState, d driver.Due, err error) {
	wait, limit, why := time.Second, "", ""
	var le *lease.LimitedError
	if errors.As(err, &le) {
		wait, limit, why = le.Wait, le.Limit, le.Why
	}
	s.metrics.LimitWait(limit, why)
	s.log.Debug("run waits for a limit", logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.KeyReason, d.Reason, "limit", limit, "why", why, "wait", wait.String())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease.ReleaseTimeout)
	defer cancel()
	if err := s.enqueueWaiting(ctx, ts, d, wait); err != nil {
		s.storeFailed("enqueue", "enqueue", "cannot queue a run that waits for a limit", Event{Task: d.Task, Entity: d.Entity}, err)
		if d.Reason == driver.ReasonTick {
			s.waitEnded(ts, d.Tick, history.SkipError) // it waits nowhere: its tick must not say it does
		}
	}
}

// limitedRun is a run a limit had no room for, and the refusal.
type limitedRun struct {
	d   driver.Due
	err error
}

// waitForLimits is waitForLimit for each of rs, a few at once: a tick of
// 100,000 entities under a limit puts them all in line, one enqueue each,
// and one after the other they took a minute.
func (f *fanOut) waitForLimits(rs []limitedRun) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(len(rs), limitEnqueuers) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(rs)); i = next.Add(1) - 1 {
				f.s.waitForLimit(f.ctx, f.ts, rs[i].d, rs[i].err)
			}
		})
	}
	wg.Wait()
}

// limitEnqueuers bounds the enqueues of one batch's waiting runs at once.
const limitEnqueuers = 16

// waitEnded counts in tick T's record a run of it that waited for a limit
// and no longer does: it ran (why ""), or was skipped for why.
func (s *Scheduler) waitEnded(ts *taskState, T time.Time, why string) *tally {
	tl := s.history.tallyFor(ts.t, T)
	tl.lateAdd(driver.SkipLimited, -1)
	if why == "" {
		tl.waited.Add(1)
		return tl
	}
	tl.lateAdd(why, 1)
	s.history.put(tl)
	return tl
}

// waitedTally is the tally of the tick whose waiting run d starts now: the
// run is counted in that tick's record, its outcome and its end, whichever
// replica fanned the tick out and however late. Any other run (nil) is not.
func (s *Scheduler) waitedTally(ts *taskState, d driver.Due) *tally {
	if d.Reason != driver.ReasonTick {
		return nil
	}
	return s.waitEnded(ts, d.Tick, "")
}

// dueSkipped counts in its tick's record a waiting tick run d that does
// not run: a newer tick of the entity ran (superseded), or the tick ran it
// on another replica (already_ran), or the entity was busy.
func (s *Scheduler) dueSkipped(ts *taskState, d driver.Due, err error) {
	if d.Reason != driver.ReasonTick {
		return
	}
	why := history.SkipBusy
	if ts.t.OnBusy == config.OnBusyReplace {
		why = history.SkipReplacing
	}
	if errors.Is(err, lease.ErrAlreadyRan) {
		why = driver.SkipAlreadyRan
		ar := (*lease.AlreadyRanError)(nil)
		if last := ts.tally.Load(); last != nil && last.tick.After(d.Tick) || errors.As(err, &ar) && ar.LastTick.After(d.Tick) {
			why = history.SkipSuperseded
		}
	}
	if why != history.SkipBusy && why != history.SkipReplacing {
		s.log.Debug(logs.MsgAlreadyRan, logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.Tick(d.Tick), "waited_for_a_limit", true)
	}
	s.waitEnded(ts, d.Tick, why)
	s.history.unbuffered(ts.t, err)
}

// backOff deals with a run whose API asked to back off: it closes the
// task's limits (that entity's budget, for a limit per entity) on every
// replica for the time the API gave, bounded by each one's max_backoff, and
// returns the run asked for after it: a tick's run is retried with its tick
// (a retry: the tick is recorded as started), any other keeps its reason.
func (s *Scheduler) backOff(t config.Task, l *lease.Lease, be *tasks.BackoffError) *driver.Next {
	after := be.After
	if after <= 0 {
		after = tasks.DefaultBackoff
	}
	wait := time.Duration(0) // the longest the task's limits are closed for
	cfg := s.Config()
	for _, name := range t.Limits {
		lim, ok := cfg.Limit(name)
		if !ok {
			continue // the config changed under the run
		}
		if lim.Rate == config.RateAuto && be.After <= 0 {
			continue // a 429 that gives no time cuts its learned rate (quotaFor), not more
		}
		d := min(after, lim.MaxBackoff)
		wait = max(wait, d)
		ctx, cancel := context.WithTimeout(context.Background(), lease.ReleaseTimeout)
		err := s.store.Budgets().Close(ctx, leaseconf.Limit(lim), l.Entity, d, be.Reason)
		cancel()
		if err != nil {
			s.storeFailed("limit", "close-limit:"+name, "cannot close a limit that an API asked to back off", Event{Task: t.Name, Entity: l.Entity}, err)
		}
		s.metrics.BackedOff(name)
	}
	if wait == 0 { // no limit to close: the default bound
		wait = min(after, config.DefaultLimit().MaxBackoff)
	}
	reason := l.Reason
	if reason == driver.ReasonTick {
		reason = driver.ReasonRetry
	}
	return &driver.Next{Reason: reason, Delay: wait, Attempt: l.Attempt, HandOver: true}
}

// linePlace is where a task's runs wait in its limits' lines: their group
// and its weight, by the attributes its fair limit names, and their head
// start.
type linePlace struct {
	fairBy, weightFrom, priorityFrom string
	fair                             bool
	priority                         time.Duration
}

// placeOf is t's, by cfg: the config in force, so that a reload that
// changes a limit's fair_by applies to the next runs asked for.
func placeOf(cfg *config.Config, t *config.Task) linePlace {
	p := linePlace{priority: t.Priority, priorityFrom: t.PriorityFrom}
	if l, ok := cfg.Fair(t); ok {
		p.fair, p.fairBy, p.weightFrom = true, l.FairBy, l.WeightFrom
	}
	return p
}

// place sets r's group, weight and head start from its entity's attributes.
func (p *linePlace) place(r *driver.Request, attrs tasks.Attributes) {
	r.HeadStart = p.priority
	if p.priorityFrom != "" {
		if d, err := time.ParseDuration(attrs[p.priorityFrom]); err == nil && d >= 0 {
			r.HeadStart = d
		}
	}
	if p.fair {
		r.Grouped, r.Group, r.Weight = true, attrs[p.fairBy], 1
		if w, err := strconv.Atoi(attrs[p.weightFrom]); err == nil && w >= 1 && w <= MaxWeight {
			r.Weight = w
		}
	}
}

// MaxWeight bounds a group's weight in a fair limit.
const MaxWeight = 1000

// quotaFor is the run's Quota callback (tasks.Run.Quota) for a task of s
// under limits with rate = "auto", nil for another: what an answer said of
// its rate is told to each of them, shared through the store; a quota used
// up until a reset closes them until then. (A function, not a method: the
// Scheduler owes methods.)
func quotaFor(s *Scheduler, task string, limits []string, entity string) func(tasks.Quota) {
	if len(limits) == 0 {
		return nil
	}
	var autos []*config.Limit
	cfg := s.Config()
	for _, name := range limits {
		if l, ok := cfg.Limit(name); ok && l.Rate == config.RateAuto {
			autos = append(autos, l)
		}
	}
	if len(autos) == 0 {
		return nil
	}
	return func(q tasks.Quota) {
		ctx, cancel := context.WithTimeout(context.Background(), lease.ReleaseTimeout)
		defer cancel()
		for _, l := range autos {
			lim := leaseconf.Limit(l)
			err := s.store.Budgets().Learn(ctx, lim, entity, driver.RateSeen{Rate: q.Rate, TooMany: q.TooMany, Source: q.Source})
			if err == nil && q.Remaining == 0 && q.Reset > 0 && !q.TooMany {
				err = s.store.Budgets().Close(ctx, lim, entity, min(q.Reset, l.MaxBackoff), "quota used up: "+q.Source)
			}
			if err != nil {
				s.storeFailed("limit", "learn-rate:"+l.Name, "cannot tell a limit what its API said of its rate", Event{Task: task, Entity: entity}, err)
			}
		}
	}
}
