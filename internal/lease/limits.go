package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// ErrLimited says a limit the request names has no room now.
var ErrLimited = errors.New("lease: a limit has no room")

// LimitedError says which limit had no room for a run, why, and how long
// until it may have.
type LimitedError struct {
	Limit  string
	Why    string        // LimitFull, LimitRate, LimitClosed, LimitQuarantine
	Wait   time.Duration // until there may be room
	Reason string        // LimitClosed: what closed it
}

func (e *LimitedError) Error() string {
	s := fmt.Sprintf("lease: limit %s: no room (%s", e.Limit, e.Why)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s + fmt.Sprintf("); again in %v", e.Wait.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *LimitedError) Is(target error) bool { return target == ErrLimited }

// limitState is this replica's side of one limit: its runs under it by
// budget key. mu serialises this replica's calls for the limit, so that
// the runs it sets (SetLimitRuns) are never older than a start it took.
type limitState struct {
	mu    sync.Mutex
	lim   driver.Limit
	runs  map[string]int
	dirty bool          // runs ended since the last SetLimitRuns
	ttl   time.Duration // the longest lease TTL of the runs it took for
}

// holdTTL is how long this replica's runs under the limit count after it
// last said them: a lease TTL and the settler's period (a third of it), so
// that they count as long as any of their leases can still be trusted,
// whichever of the renewal and the settler last reached Redis.
func (st *limitState) holdTTL() time.Duration { return st.ttl + st.ttl/3 }

// limitHold is one start a run took under a limit, for its budget key.
type limitHold struct {
	st  *limitState
	key string
}

// limits are the store's limits by name, and their settler.
type limits struct {
	b     driver.Driver
	clock driver.Clock
	// quarantined starts the store's quarantine: a limit's keys were lost.
	quarantined func(left time.Duration)

	mu     sync.Mutex
	byName map[string]*limitState
	wake   chan struct{}
}

// SetLimits declares the limits requests may name (Request.Limits), as the
// config gives them; a limit left out keeps counting the runs under it
// until they end.
func (s *Store) SetLimits(ls []driver.Limit) {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	if s.limits.byName == nil {
		s.limits.byName = map[string]*limitState{}
	}
	for _, l := range ls {
		st := s.limits.byName[l.Name]
		if st == nil {
			st = &limitState{runs: map[string]int{}}
			s.limits.byName[l.Name] = st
		}
		st.mu.Lock()
		st.lim = l
		st.mu.Unlock()
	}
}

func (ls *limits) limitState(name string) *limitState {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.byName[name]
}

// budgetKey is entity's budget under lim: its own, or the limit's one.
func budgetKey(lim driver.Limit, entity string) string {
	if lim.PerEntity {
		return driver.Escape(entity)
	}
	return ""
}

// takeLimits takes, for each request that names limits and is not refused
// already (bad), a start under each of them. It returns the starts taken
// by request, and, for those refused, a *LimitedError (or the I/O error)
// in bad, which it makes when nil. A request refused by one limit gives
// back what it took under the others.
func (ls *limits) takeLimits(ctx context.Context, reqs []driver.Request, bad []error) ([][]limitHold, []error) {
	var names []string
	for i := range reqs {
		if bad == nil || bad[i] == nil {
			for _, n := range reqs[i].Limits {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	if len(names) == 0 {
		return nil, bad
	}
	if bad == nil {
		bad = make([]error, len(reqs))
	}
	holds := make([][]limitHold, len(reqs))
	for _, name := range names {
		st := ls.limitState(name)
		var idx []int
		for i := range reqs {
			if bad[i] == nil && slices.Contains(reqs[i].Limits, name) {
				idx = append(idx, i)
			}
		}
		if st == nil {
			for _, i := range idx {
				bad[i] = fmt.Errorf("lease: limit %q is not declared (Store.SetLimits)", name)
			}
			continue
		}
		ls.takeLimit(ctx, st, reqs, idx, holds, bad)
	}
	var back []limitHold
	for i := range reqs {
		if bad[i] != nil {
			back = append(back, holds[i]...)
			holds[i] = nil
		}
	}
	ls.giveBack(ctx, back)
	return holds, bad
}

// takeLimit takes a start under st's limit for each request of idx.
func (ls *limits) takeLimit(ctx context.Context, st *limitState, reqs []driver.Request, idx []int, holds [][]limitHold, bad []error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	keys := make([]string, len(idx))
	asks := make([]driver.LimitAsk, len(idx))
	for j, i := range idx {
		r := &reqs[i]
		keys[j] = budgetKey(st.lim, r.Entity)
		since := r.Since
		if since.IsZero() && r.Reason == driver.ReasonTick {
			since = r.Tick
		}
		asks[j] = driver.LimitAsk{Key: keys[j], Waiter: limitWaiter(r.Task, r.Entity), Since: since,
			HeadStart: r.HeadStart, Group: r.Group, Weight: r.Weight, Grouped: r.Grouped}
		if driver.ByRecord(r.Reason) {
			// An older tick's run (a catch-up's, a backfill's) waits
			// behind the live ticks' runs, in a place of its own.
			asks[j].Waiter += olderWaiter
			asks[j].HeadStart -= BehindLive
		}
		st.ttl = max(st.ttl, r.TTL)
	}
	gs, err := ls.b.TakeLimit(ctx, st.lim, st.holdTTL(), asks)
	if err != nil {
		for _, i := range idx {
			bad[i] = fmt.Errorf("take limit %s: %w", st.lim.Name, err)
		}
		return
	}
	for j, g := range gs {
		i := idx[j]
		if g.OK {
			st.runs[keys[j]]++
			holds[i] = append(holds[i], limitHold{st: st, key: keys[j]})
			continue
		}
		if g.Why == driver.LimitQuarantine {
			// The limit's keys were lost with its master's data: a
			// quarantine as the leases' own.
			ls.quarantined(g.Wait)
			bad[i] = &QuarantineError{Left: g.Wait}
			continue
		}
		bad[i] = &LimitedError{Limit: st.lim.Name, Why: g.Why, Wait: g.Wait, Reason: g.Reason}
	}
}

// giveBack returns starts taken but not used: the run counts no more, and
// the rate's start is given back.
func (ls *limits) giveBack(ctx context.Context, hs []limitHold) {
	if len(hs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	for _, g := range groupHolds(hs) {
		st := g[0].st
		st.mu.Lock()
		back := make([]string, len(g))
		for j, h := range g {
			st.runs[h.key]--
			back[j] = h.key
		}
		if err := ls.b.SetLimitRuns(ctx, st.lim, st.holdTTL(), st.runs, back); err != nil {
			st.dirty = true // the settler sets them again
		}
		st.mu.Unlock()
	}
}

// giveBackUnused gives back what was taken (holds, by request) for runs
// that do not start (out, their answers).
func (ls *limits) giveBackUnused(ctx context.Context, holds [][]limitHold, out []Result) {
	var back []limitHold
	for i, h := range holds {
		if out[i].Lease == nil {
			back = append(back, h...)
		}
	}
	ls.giveBack(ctx, back)
}

// groupHolds groups starts by limit.
func groupHolds(hs []limitHold) [][]limitHold {
	var out [][]limitHold
	for _, h := range hs {
		k := slices.IndexFunc(out, func(g []limitHold) bool { return g[0].st == h.st })
		if k < 0 {
			out = append(out, []limitHold{h})
		} else {
			out[k] = append(out[k], h)
		}
	}
	return out
}

// limitsEnded counts runs that ended out of their limits; the settler
// tells the store soon after.
func (ls *limits) limitsEnded(hs []limitHold) {
	if len(hs) == 0 {
		return
	}
	for _, h := range hs {
		h.st.mu.Lock()
		h.st.runs[h.key]--
		h.st.dirty = true
		h.st.mu.Unlock()
	}
	select {
	case ls.wake <- struct{}{}:
	default:
	}
}

// settleLimits is the settler: it tells the store the runs this replica
// holds under each limit when some ended, and every third of their lease
// TTL while it holds any, so that they keep counting; a replica that stops
// (killed, cut off) has its runs counted for holdTTL more, as long as
// their leases could be trusted, then they free themselves.
func (ls *limits) settleLimits(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	refresh := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ls.wake:
			// Runs that end together are told in one call: a tick's
			// runs end by the hundred.
			select {
			case <-ctx.Done():
				return
			case <-time.After(settleGather):
			}
		case <-t.C:
		}
		now := ls.clock.Now()
		all := !now.Before(refresh)
		if all {
			refresh = now.Add(ls.settlePeriod())
		}
		ls.settle(ctx, all)
		t.Reset(refresh.Sub(ls.clock.Now()))
	}
}

// settlePeriod is a third of the shortest lease TTL of the runs taken under
// a limit, or a second before any was.
func (ls *limits) settlePeriod() time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	p := time.Second
	for _, st := range ls.byName {
		st.mu.Lock()
		if st.ttl > 0 {
			p = min(p, st.ttl/3)
		}
		st.mu.Unlock()
	}
	return p
}

// settleGather is how long the settler gathers runs that ended before it
// tells the store: their places are free that much later.
const settleGather = 50 * time.Millisecond

// settle sets this replica's runs under each limit whose runs ended
// (dirty), or under every limit it holds runs of (all).
func (ls *limits) settle(ctx context.Context, all bool) {
	ls.mu.Lock()
	sts := make([]*limitState, 0, len(ls.byName))
	for _, st := range ls.byName {
		sts = append(sts, st)
	}
	ls.mu.Unlock()
	for _, st := range sts {
		st.mu.Lock()
		held := false
		for _, n := range st.runs {
			held = held || n > 0
		}
		if st.dirty || all && held {
			cctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
			if ls.b.SetLimitRuns(cctx, st.lim, st.holdTTL(), st.runs, nil) == nil {
				st.dirty = false
			}
			cancel()
		}
		st.mu.Unlock()
	}
}

// LimitStatus is a limit's state: its runs across the replicas and the
// budgets closed.
type LimitStatus struct {
	Limit driver.Limit
	// Runs is how many runs hold the limit, across the replicas.
	Runs int
	// Busiest is, for a limit per entity, the most runs of one entity.
	Busiest int
	// Waiting counts the runs waiting in the limit's line; Oldest are the
	// oldest of them (at most a few hundred), oldest first, with their
	// task and entity.
	Waiting int
	Oldest  []WaitingRun
	Closed  map[string]driver.LimitClosing // by entity ("" for a limit not per entity)
	// For a fair limit: GroupsWaiting counts the groups with runs waiting;
	// Groups are those that waited longest (at most ShownGroups), longest
	// first, each with its share of the starts of the last minute (Starts);
	// Starved counts the groups (of the first driver.MaxGroups) that got
	// less than half their fair share of them while they waited all along.
	GroupsWaiting int
	Groups        []GroupStatus
	Starts        int
	Starved       int
	// For an auto limit: the rate learned (starts a second; 0: none yet)
	// and what from.
	Rate       float64
	RateSource string
}

// GroupStatus is a group of a fair limit's line.
type GroupStatus struct {
	Name    string
	Waiting int
	Oldest  time.Time // its oldest waiting run's since
	Weight  int
	// Started is its starts of the last minute; FairShare the starts its
	// weight was owed of them, among the groups waiting now. Starved: it
	// had runs waiting the whole minute, and got less than half of that.
	Started   int
	FairShare float64
	Starved   bool
}

// ShownGroups bounds LimitStatus.Groups.
const ShownGroups = 20

// groups is st's groups as LimitStatus says them, at now.
func groups(st driver.LimitState, now time.Time) (out []GroupStatus, starved int) {
	weights := 0
	for _, g := range st.Groups {
		weights += g.Weight
	}
	for _, g := range st.Groups {
		gs := GroupStatus{Name: g.Name, Waiting: g.Waiting, Oldest: g.Oldest, Weight: g.Weight, Started: g.Started}
		gs.FairShare = float64(st.Starts) * float64(g.Weight) / float64(max(weights, 1))
		gs.Starved = !g.Since.IsZero() && now.Sub(g.Since) >= driver.StartsWindow && float64(g.Started) < gs.FairShare/2
		if gs.Starved {
			starved++
		}
		out = append(out, gs)
	}
	slices.SortStableFunc(out, func(a, b GroupStatus) int { return a.Oldest.Compare(b.Oldest) })
	return out[:min(len(out), ShownGroups)], starved
}

// WaitingRun is a run waiting in a limit's line, since when.
type WaitingRun struct {
	Task, Entity string
	Since        time.Time
}

// LimitStatus reads the state of lim.
func (f Fleet) LimitStatus(ctx context.Context, lim driver.Limit) (LimitStatus, error) {
	s := f.s
	st, err := s.b.LimitState(ctx, lim)
	if err != nil {
		return LimitStatus{}, fmt.Errorf("limit %s: %w", lim.Name, err)
	}
	out := LimitStatus{Limit: lim, Closed: map[string]driver.LimitClosing{}, Waiting: st.Waiting, GroupsWaiting: st.GroupsWaiting, Starts: st.Starts,
		Rate: st.Rate, RateSource: st.RateSource}
	out.Groups, out.Starved = groups(st, s.clock.Now())
	for _, w := range st.Oldest {
		since := w.Since
		waiter, older := strings.CutSuffix(w.Waiter, olderWaiter)
		if older {
			since = since.Add(-BehindLive)
		}
		task, entity, _ := strings.Cut(waiter, "/")
		task, err1 := driver.Unescape(task)
		entity, err2 := driver.Unescape(entity)
		if err1 == nil && err2 == nil {
			out.Oldest = append(out.Oldest, WaitingRun{Task: task, Entity: entity, Since: since})
		}
	}
	for k, c := range st.Closed {
		if e, err := driver.Unescape(k); err == nil {
			out.Closed[e] = c
		}
	}
	byKey := map[string]int{}
	for _, rs := range st.Runs {
		for k, n := range rs {
			out.Runs += n
			byKey[k] += n
		}
	}
	for _, n := range byKey {
		out.Busiest = max(out.Busiest, n)
	}
	return out, nil
}

// limitHolder is who this store's runs count under in a limit: the
// replica id and this process's nonce, so that two processes given one
// replica_id (a copied unit file) each count their own runs and cannot
// together run more than the limit allows.
func (s *Store) limitHolder() string { return s.opts.Replica + "/" + s.tok.nonce }

// limitWaiter is the place in a limit's line of task's run of entity.
func limitWaiter(task, entity string) string {
	return driver.Escape(task) + "/" + driver.Escape(entity)
}

// olderWaiter ends the waiter of an older tick's run of an entity (a
// catch-up's, a backfill's): a place of its own, which a live tick's run
// of the entity neither takes nor is taken by.
const olderWaiter = "/older"

// BehindLive is how far behind the runs that ask at the time an older
// tick's run (a catch-up's, a backfill's) waits in a limit's line: it
// takes the room the live ticks' runs leave.
const BehindLive = 24 * time.Hour
