package lease

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// NewMemory returns a Store whose leases live in this process: the embedded
// default for one replica without Redis. Its semantics are those of the
// Redis store (the same conformance suite runs against both), except that
// there is no data loss to detect and nothing is shared between processes.
func NewMemory(opts Options) *Store {
	b := &memBackend{
		held: map[string]*memLease{}, states: map[string]*memState{},
		due: map[string]*memDue{}, pausedSet: map[string]string{}, tasks: map[string]string{},
		tickRecs: map[string][]string{}, lists: map[string][]string{},
		followups: map[string][]string{}, answered: map[string]map[string]Outcome{},
	}
	return newStore(b, opts, func(o *Options) { b.opts = o })
}

type memBackend struct {
	opts *Options

	mu        sync.Mutex
	held      map[string]*memLease // by member
	states    map[string]*memState
	due       map[string]*memDue
	pausedSet map[string]string   // task → PauseInfo, encoded
	tasks     map[string]string   // the task registry: name → TaskInfo, encoded
	tickRecs  map[string][]string // by task: tick records, newest first (history.go)
	lists     map[string][]string // by list and task: values, newest first
	// announced is the one replica, as it announced itself last.
	announced Replica
	followups map[string][]string           // by member: the requests a follow-up answers
	answered  map[string]map[string]Outcome // by task and request id: answers by entity
}

type memLease struct {
	token, holder string
	since, expire time.Time
	fence         int64
	reason        Reason
	revoked       bool // by an operator: renewals refused, release still frees it
}

type memState struct {
	tick     time.Time
	fence    int64
	followup bool
	fuTick   time.Time // the latest tick of the requests the follow-up stands for
	last     LastRun
	expire   time.Time
}

type memDue struct {
	d Due // At is the score; claim is the current claim
}

func (b *memBackend) now() time.Time { return b.opts.Clock.Now() }

// gc drops what has expired for one member.
func (b *memBackend) gc(m string, now time.Time) {
	if l, ok := b.held[m]; ok && !now.Before(l.expire) {
		delete(b.held, m)
	}
	if s, ok := b.states[m]; ok && !now.Before(s.expire) {
		delete(b.states, m)
	}
}

func (b *memBackend) state(m string, now time.Time) *memState {
	s, ok := b.states[m]
	if !ok {
		s = &memState{}
		b.states[m] = s
	}
	s.expire = now.Add(b.opts.StateTTL)
	return s
}

func (b *memBackend) acquire(_ context.Context, holder string, _ time.Duration, reqs []acquireArg) ([]acquireReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]acquireReply, len(reqs))
	for i, a := range reqs {
		if a.token == "" {
			continue
		}
		m := member(a.req.Task, a.req.Entity)
		b.gc(m, now)
		st := b.states[m]
		if a.req.Reason == ReasonTick && a.req.Tick.Sub(now) > EarlyTolerance {
			out[i] = acquireReply{status: grantEarly, left: a.req.Tick.Sub(now)}
			continue
		}
		if a.req.Reason == ReasonTick && st != nil && !st.tick.IsZero() && !st.tick.Before(a.req.Tick) {
			out[i] = acquireReply{status: grantRan, at: st.tick}
			continue
		}
		if cur, ok := b.held[m]; ok {
			if a.req.Queue {
				s := b.state(m, now)
				s.followup = true
				if t := a.req.runTick(); t.After(s.fuTick) {
					s.fuTick = t
				}
				if a.req.Reason == ReasonTick && a.req.Tick.After(s.tick) {
					s.tick = a.req.Tick // carried by the follow-up: not queued again
				}
			}
			if d := a.req.From; d != nil && a.req.Queue {
				b.followups[m] = joinRequests(b.followups[m], d.Requests)
			} else if d != nil {
				b.answerLocked(a.req.Task, a.req.Entity, d.Requests, AnswerSkipped)
			}
			if a.req.From != nil {
				b.ackLocked(m, a.req.From.claim)
			}
			out[i] = acquireReply{status: grantBusy, holder: cur.holder, at: cur.since, fence: cur.fence}
			continue
		}
		s := b.state(m, now)
		fence := max(s.fence+1, now.UnixMicro())
		s.fence = fence
		if a.req.Reason == ReasonTick {
			s.tick = a.req.Tick
		}
		if a.req.From != nil {
			b.ackLocked(m, a.req.From.claim)
		}
		b.held[m] = &memLease{token: a.token, holder: holder, since: now, expire: now.Add(a.req.TTL), fence: fence, reason: a.req.Reason}
		out[i] = acquireReply{status: grantOK, fence: fence, at: now}
	}
	return out, nil
}

func (b *memBackend) renew(_ context.Context, ls []*Lease) ([]renewal, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	ok := make([]renewal, len(ls))
	for i, l := range ls {
		m := member(l.Task, l.Entity)
		b.gc(m, now)
		switch cur, found := b.held[m]; {
		case !found || cur.token != l.token:
		case cur.revoked:
			ok[i] = renewRevoked
		default:
			cur.expire = now.Add(l.ttl)
			ok[i] = renewOK
		}
	}
	return ok, nil
}

func (b *memBackend) release(_ context.Context, rs []releaseArg) ([]releaseReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]releaseReply, len(rs))
	for i, r := range rs {
		out[i].followUp, out[i].err = b.releaseOne(r.l, r.o, r.next)
	}
	return out, nil
}

func (b *memBackend) releaseOne(l *Lease, o Finished, next *Next) (bool, error) {
	now := b.now()
	m := member(l.Task, l.Entity)
	b.gc(m, now)
	cur, ok := b.held[m]
	if !ok || cur.token != l.token {
		b.answerLocked(l.Task, l.Entity, l.Requests, o.Outcome)
		return false, ErrNotHeld
	}
	delete(b.held, m)
	s := b.state(m, now)
	s.last = LastRun{Outcome: o.Outcome, Reason: cur.reason, Replica: b.opts.Replica, Fence: cur.fence, Started: o.Started, Ended: o.Ended, Error: cutError(o.Error)}
	fu, fuTick := s.followup, l.Tick
	if fu && !s.fuTick.IsZero() {
		fuTick = s.fuTick
	}
	s.followup, s.fuTick = false, time.Time{}
	var fuReqs []string
	if fu {
		fuReqs = b.followups[m]
		delete(b.followups, m)
	}
	reqs := l.Requests
	if next == nil || !next.HandOver {
		b.answerLocked(l.Task, l.Entity, reqs, o.Outcome)
		reqs = nil
	}
	if next != nil {
		b.addDueLocked(m, Due{Task: l.Task, Entity: l.Entity, Reason: next.Reason, Attempt: next.Attempt, Tick: fuTick,
			Requests: joinRequests(reqs, fuReqs)}, now.Add(next.Delay))
	} else if fu {
		b.addDueLocked(m, Due{Task: l.Task, Entity: l.Entity, Reason: ReasonQueued, Tick: fuTick, Requests: fuReqs}, now)
	}
	return fu, nil
}

// answerLocked records outcome as the answer of each request to entity.
func (b *memBackend) answerLocked(task, entity string, ids []string, outcome Outcome) {
	for _, id := range ids {
		k := member(task, id)
		if b.answered[k] == nil {
			b.answered[k] = map[string]Outcome{}
		}
		b.answered[k][entity] = outcome
	}
}

// joinRequests adds ids b to a, keeping the newest maxRequests, as
// join_reqs in lib.lua does.
func joinRequests(a, b []string) []string {
	all := append(slices.Clip(a), b...)
	if len(all) > maxRequests {
		all = all[len(all)-maxRequests:]
	}
	if len(all) == 0 {
		return nil
	}
	return all
}

func (b *memBackend) ackLocked(m, claim string) bool {
	if claim == "" {
		return false
	}
	if e, ok := b.due[m]; ok && e.d.claim == claim {
		delete(b.due, m)
		return true
	}
	return false
}

// addDueLocked keeps one request per member as add_due in lib.lua does;
// the conformance suite holds the two stores to the same behaviour.
func (b *memBackend) addDueLocked(m string, d Due, at time.Time) {
	if e, ok := b.due[m]; ok && e.d.claim == "" {
		d.Requests = joinRequests(e.d.Requests, d.Requests)
		if !e.d.At.After(at) {
			e.d.Requests = d.Requests
			return
		}
	}
	d.At, d.claim = at, ""
	b.due[m] = &memDue{d: d}
}

func (b *memBackend) enqueue(_ context.Context, d Due, delay time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addDueLocked(member(d.Task, d.Entity), d, b.now().Add(delay))
	return nil
}

func (b *memBackend) take(_ context.Context, limit int, vis time.Duration, prefix string) ([]Due, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	var ready []*memDue
	for _, e := range b.due {
		if !e.d.At.After(now) {
			ready = append(ready, e)
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].d.At.Before(ready[j].d.At) })
	if len(ready) > limit {
		ready = ready[:limit]
	}
	out := make([]Due, len(ready))
	for i, e := range ready {
		out[i] = e.d
		e.d.claim = prefix + ":" + strconv.Itoa(i+1)
		e.d.At = now.Add(vis)
		out[i].claim = e.d.claim
	}
	return out, nil
}

func (b *memBackend) ack(_ context.Context, d Due) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ackLocked(member(d.Task, d.Entity), d.claim) {
		b.answerLocked(d.Task, d.Entity, d.Requests, AnswerDropped)
	}
	return nil
}

func (b *memBackend) answers(_ context.Context, task, id string) (map[string]Outcome, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.answered[member(task, id)]), nil
}

func (b *memBackend) forget(_ context.Context, task, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.answered, member(task, id))
	return nil
}
