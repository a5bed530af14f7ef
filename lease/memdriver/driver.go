package memdriver

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// New returns a driver that keeps a store's state in this process: the
// embedded default for one replica without Redis. Its semantics are those
// of the Redis driver (the same conformance suite runs against both),
// except that there is no data loss to detect and nothing is shared
// between processes.
func New() driver.Driver {
	return &memDriver{
		held: map[member]*memLease{}, states: map[member]*memState{},
		due: map[member]*memDue{}, pausedSet: map[string]driver.PauseInfo{}, tasks: map[string]driver.TaskInfo{}, shards: map[string]int{},
		tickRecs: map[string][]driver.TickRecord{}, failures: map[string][]driver.Failure{}, actions: map[string][]driver.Action{},
		followups: map[member][]string{}, answered: map[member]map[string]driver.Outcome{}, claims: map[string]time.Time{},
		ran: map[ranKey]time.Time{}, backfills: map[string]*driver.Backfill{},
	}
}

// memDriver is the in-process driver: maps under one mutex, each method a Go
// twin of the Redis driver's script.
type memDriver struct {
	cfg driver.Config

	mu        sync.Mutex
	held      map[member]*memLease
	states    map[member]*memState
	due       map[member]*memDue
	pausedSet map[string]driver.PauseInfo    // by task
	tasks     map[string]driver.TaskInfo     // the task registry, by name
	shards    map[string]int                 // by task: its shard count, once recorded
	tickRecs  map[string][]driver.TickRecord // by task: tick records, newest first (history.go)
	failures  map[string][]driver.Failure    // by task ("" the prefix's): newest first
	actions   map[string][]driver.Action     // by task ("" the prefix's): newest first
	// announced is the one replica, as it announced itself last.
	announced driver.Replica
	followups map[member][]string                  // the requests a follow-up answers
	answered  map[member]map[string]driver.Outcome // by task and request id (as entity): answers by entity
	limits    map[string]*memLimit                 // by name (limits.go)
	claims    map[string]time.Time                 // Claim's names, to when they are held
	ran       map[ranKey]time.Time                 // the run record (Request.Record), to when it is kept
	backfills map[string]*driver.Backfill          // by id (backfill.go)
}

// ranKey is an entity's tick in the run record.
type ranKey struct {
	m    member
	tick time.Time
	of   string // a record of the tick's own (Request.RecordOf); "": the tick's
}

// member names a task's entity: the key of its state.
type member struct{ task, entity string }

type memLease struct {
	token, holder string
	since, expire time.Time
	fence         int64
	reason        driver.Reason
	revoked       bool // by an operator: renewals refused, release still frees it
	replaced      bool // revoked by a newer tick (Request.Replace)
}

type memState struct {
	tick      time.Time
	fence     int64
	followup  bool
	fuTick    time.Time   // the latest tick of the requests the follow-up stands for
	fuReplace bool        // the follow-up replaces the holder: ReasonReplaced
	fuBuf     []time.Time // with a buffer (QueueMax > 1), the ticks after fuTick, oldest first
	last      driver.LastRun
	expire    time.Time
}

type memDue struct {
	d driver.Due // At is the score; claim is the current claim
}

// Configure keeps the store's settings.
func (b *memDriver) Configure(cfg driver.Config) { b.cfg = cfg }

func (b *memDriver) now() time.Time { return b.cfg.Clock.Now() }

// gc drops what has expired for one member.
func (b *memDriver) gc(m member, now time.Time) {
	if l, ok := b.held[m]; ok && !now.Before(l.expire) {
		delete(b.held, m)
	}
	if s, ok := b.states[m]; ok && !now.Before(s.expire) {
		delete(b.states, m)
	}
}

func (b *memDriver) state(m member, now time.Time) *memState {
	s, ok := b.states[m]
	if !ok {
		s = &memState{}
		b.states[m] = s
	}
	s.expire = now.Add(b.cfg.StateTTL)
	return s
}

func (b *memDriver) Acquire(_ context.Context, reqs []driver.AcquireArg) ([]driver.AcquireReply, error) {
	holder := b.cfg.Replica
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]driver.AcquireReply, len(reqs))
	for i, a := range reqs {
		if a.Token == "" {
			continue
		}
		m := member{a.Req.Task, a.Req.Entity}
		b.gc(m, now)

		st := b.states[m]
		if a.Req.Reason == driver.ReasonTick && a.Req.Tick.Sub(now) > driver.EarlyTolerance {
			out[i] = driver.AcquireReply{Status: driver.GrantEarly, Left: a.Req.Tick.Sub(now)}
			continue
		}
		b.markTick(a.Req, now)
		if a.Req.Reason == driver.ReasonTick && st != nil && !st.tick.IsZero() && !st.tick.Before(a.Req.TickFloor()) {
			out[i] = driver.AcquireReply{Status: driver.GrantRan, At: st.tick}
			continue
		}
		if driver.ByRecord(a.Req.Reason) && b.ran[ranKey{m, a.Req.Tick, a.Req.RecordOf}].After(now) {
			out[i] = driver.AcquireReply{Status: driver.GrantRan, At: a.Req.Tick} // the record decides, not the last tick
			continue
		}
		if cur, ok := b.held[m]; ok {
			out[i] = b.busyLocked(m, cur, a.Req, now)
			continue
		}
		s := b.state(m, now)
		if a.Req.Reason == driver.ReasonReplaced && s.fuReplace {
			// The replacing run, come at the holder's expiry (it never
			// released): it is the follow-up, not one more run after it;
			// but for the triggers that asked meanwhile (acquire.lua's).
			s.followup, s.fuReplace, s.fuTick, s.fuBuf = len(b.followups[m]) > 0, false, time.Time{}, nil
		}
		fence := max(s.fence+1, now.UnixMicro())
		s.fence = fence
		if (a.Req.Reason == driver.ReasonTick || driver.ByRecord(a.Req.Reason)) && a.Req.Tick.After(s.tick) {
			s.tick = a.Req.Tick
		}
		if a.Req.Record > 0 {
			b.ran[ranKey{m, a.Req.Tick, ""}] = now.Add(a.Req.Record)
			if a.Req.RecordOf != "" {
				b.ran[ranKey{m, a.Req.Tick, a.Req.RecordOf}] = now.Add(a.Req.Record)
			}
		}
		if a.Req.From != nil {
			b.ackLocked(m, a.Req.From.Claim)
		}
		b.held[m] = &memLease{token: a.Token, holder: holder, since: now, expire: now.Add(a.Req.TTL), fence: fence, reason: a.Req.Reason}
		out[i] = driver.AcquireReply{Status: driver.GrantOK, Fence: fence, At: now}
	}
	return out, nil
}

func (b *memDriver) Renew(_ context.Context, ls []*driver.Lease) ([]driver.Renewal, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	ok := make([]driver.Renewal, len(ls))
	for i, l := range ls {
		m := member{l.Task, l.Entity}
		b.gc(m, now)
		switch cur, found := b.held[m]; {
		case !found || cur.token != l.Token:
		case cur.replaced:
			ok[i] = driver.RenewReplaced
		case cur.revoked:
			ok[i] = driver.RenewRevoked
		default:
			cur.expire = now.Add(l.TTL)
			ok[i] = driver.RenewOK
		}
	}
	return ok, nil
}

func (b *memDriver) Release(_ context.Context, rs []driver.ReleaseArg) ([]driver.ReleaseReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]driver.ReleaseReply, len(rs))
	for i, r := range rs {
		out[i] = b.releaseOne(r.Lease, r.Finished, r.Next)
	}
	return out, nil
}

func (b *memDriver) releaseOne(l *driver.Lease, o driver.Finished, next *driver.Next) driver.ReleaseReply {
	now := b.now()
	m := member{l.Task, l.Entity}
	b.gc(m, now)
	cur, ok := b.held[m]
	if !ok || cur.token != l.Token {
		b.answerLocked(l.Task, l.Entity, l.Requests, o.Outcome)
		return driver.ReleaseReply{Err: driver.ErrNotHeld}
	}
	delete(b.held, m)
	s := b.state(m, now)
	s.last = driver.LastRun{Outcome: o.Outcome, Reason: cur.reason, Replica: b.cfg.Replica, Fence: cur.fence, Started: o.Started, Ended: o.Ended, Error: driver.CutError(o.Error)}
	fu, fuTick, fuReason := s.followup, l.Tick, driver.ReasonQueued
	if fu && !s.fuTick.IsZero() {
		fuTick = s.fuTick
	}
	if s.fuReplace {
		fuReason = driver.ReasonReplaced
	}
	s.followup, s.fuTick, s.fuReplace = false, time.Time{}, false
	if fu && len(s.fuBuf) > 0 { // the next buffered tick: the follow-up of the run enqueued here
		s.followup, s.fuTick, s.fuBuf = true, s.fuBuf[0], s.fuBuf[1:]
	}
	var fuReqs []string
	if fu {
		fuReqs = b.followups[m] // they go with the first follow-up
		delete(b.followups, m)
	}
	reqs := l.Requests
	if next == nil || !next.HandOver {
		b.answerLocked(l.Task, l.Entity, reqs, o.Outcome)
		reqs = nil
	}
	var sup time.Time
	if next != nil {
		sup = b.addDueLocked(m, driver.Due{Task: l.Task, Entity: l.Entity, Reason: next.Reason, Attempt: next.Attempt, Tick: fuTick,
			Requests: joinRequests(reqs, fuReqs)}, now.Add(next.Delay))
	} else if fu {
		sup = b.addDueLocked(m, driver.Due{Task: l.Task, Entity: l.Entity, Reason: fuReason, Tick: fuTick, Requests: fuReqs}, now)
	}
	return driver.ReleaseReply{FollowUp: fu, Superseded: sup}
}

// busyLocked answers req for m, held by cur: busy, leaving a follow-up
// (Queue, Replace), and revoking cur with Replace.
func (b *memDriver) busyLocked(m member, cur *memLease, req *driver.Request, now time.Time) driver.AcquireReply {
	rep := driver.AcquireReply{Status: driver.GrantBusy, Holder: cur.holder, At: cur.since, Fence: cur.fence}
	if req.Replace {
		rep.Replaced = b.replaceLocked(m, cur, req, now)
	}
	follow := req.Queue || req.Replace
	if follow {
		s := b.state(m, now)
		s.followup = true
		if req.QueueMax > 1 && req.Reason == driver.ReasonTick {
			rep.Missed, rep.Dropped = s.buffer(req.Tick, req.QueueMax, req.QueueAge)
		} else if t := req.RunTick(); t.After(s.fuTick) && req.QueueMax <= 1 {
			s.fuTick = t
		}
		if req.Reason == driver.ReasonTick && req.Tick.After(s.tick) {
			s.tick = req.Tick // carried by the follow-up: not queued again
		}
		if req.Reason == driver.ReasonTick && req.Record > 0 { // the tick counts as run
			b.ran[ranKey{m, req.Tick, ""}] = now.Add(req.Record)
		}
	}
	if d := req.From; d != nil {
		if follow {
			b.followups[m] = joinRequests(b.followups[m], d.Requests)
		} else {
			b.answerLocked(req.Task, req.Entity, d.Requests, driver.AnswerSkipped)
		}
		b.ackLocked(m, d.Claim)
	}
	return rep
}

// buffer adds tick T to the follow-up's buffer of ticks, as lib.lua's
// buffer_tick does, and returns the ticks missed (more than age before T,
// age > 0) and dropped (the oldest past max).
func (s *memState) buffer(T time.Time, max int, age time.Duration) (missed, dropped []time.Time) {
	l := s.fuBuf
	if !s.fuTick.IsZero() {
		l = append([]time.Time{s.fuTick}, l...)
	}
	if i, found := slices.BinarySearchFunc(l, T, time.Time.Compare); !found {
		l = slices.Insert(l, i, T)
	}
	for age > 0 && len(l) > 0 && l[0].Before(T.Add(-age)) {
		missed, l = append(missed, l[0]), l[1:]
	}
	for len(l) > max {
		dropped, l = append(dropped, l[0]), l[1:]
	}
	s.fuTick, s.fuBuf = l[0], slices.Clone(l[1:])
	return missed, dropped
}

// replaceLocked revokes cur, m's lease, for req (Request.Replace), as
// acquire.lua's replace does, and says whether it was not revoked before:
// the follow-up replaces it, at its release or at its expiry when it never
// releases.
func (b *memDriver) replaceLocked(m member, cur *memLease, req *driver.Request, now time.Time) bool {
	s := b.state(m, now)
	s.fuReplace = true
	b.addDueLocked(m, driver.Due{Task: req.Task, Entity: req.Entity, Reason: driver.ReasonReplaced, Tick: req.RunTick()}, cur.expire)
	if cur.revoked {
		return false
	}
	cur.revoked, cur.replaced = true, true
	return true
}

// answerLocked records outcome as the answer of each request to entity.
func (b *memDriver) answerLocked(task, entity string, ids []string, outcome driver.Outcome) {
	for _, id := range ids {
		k := member{task, id}
		if b.answered[k] == nil {
			b.answered[k] = map[string]driver.Outcome{}
		}
		b.answered[k][entity] = outcome
	}
}

// joinRequests adds ids b to a, keeping the newest MaxRequests, as
// join_reqs in lib.lua does.
func joinRequests(a, b []string) []string {
	all := append(slices.Clip(a), b...)
	if len(all) > driver.MaxRequests {
		all = all[len(all)-driver.MaxRequests:]
	}
	if len(all) == 0 {
		return nil
	}
	return all
}

func (b *memDriver) ackLocked(m member, claim string) bool {
	if claim == "" {
		return false
	}
	if e, ok := b.due[m]; ok && e.d.Claim == claim {
		delete(b.due, m)
		return true
	}
	return false
}

// addDueLocked keeps one request per member as add_due in lib.lua does;
// the conformance suite holds the two stores to the same behaviour. It
// returns the tick of a tick's waiting run superseded, or zero.
func (b *memDriver) addDueLocked(m member, d driver.Due, at time.Time) time.Time {
	sup, _ := b.addDue(m, d, at)
	return sup
}

// addDue is addDueLocked that also says, with driver.ErrWaiting, that the
// same tick's waiting run covers d (add_due's 2).
func (b *memDriver) addDue(m member, d driver.Due, at time.Time) (time.Time, error) {
	e, ok := b.due[m]
	if !ok || e.d.Claim != "" { // none, or in flight: the one asked for now comes after it
		d.At, d.Claim = at, ""
		b.due[m] = &memDue{d: d}
		return time.Time{}, nil
	}
	bothTicks := d.Reason == driver.ReasonTick && e.d.Reason == driver.ReasonTick
	switch {
	case bothTicks && d.Tick.After(e.d.Tick):
		// add_due's rule: a newer tick's waiting run supersedes the older's.
		superseded := e.d.Tick
		e.d.Tick, e.d.Requests = d.Tick, joinRequests(e.d.Requests, d.Requests)
		if at.Before(e.d.At) {
			e.d.At = at
		}
		return superseded, nil
	case bothTicks && d.Tick.Equal(e.d.Tick):
		e.d.Requests = joinRequests(e.d.Requests, d.Requests) // the same tick's run waits already
		return time.Time{}, driver.ErrWaiting
	case bothTicks && d.Tick.Before(e.d.Tick):
		e.d.Requests = joinRequests(e.d.Requests, d.Requests) // an older tick's run joining the newer's
		return d.Tick, nil
	}
	d.Requests = joinRequests(e.d.Requests, d.Requests)
	// add_due's rule: a tick's run waiting for a limit yields to any other
	// run asked for (superseded by it), which takes its place (superseding it).
	weaker := d.Reason == driver.ReasonTick && e.d.Reason != driver.ReasonTick
	stronger := d.Reason != driver.ReasonTick && e.d.Reason == driver.ReasonTick
	switch {
	case weaker:
		e.d.Requests = d.Requests
		return d.Tick, nil
	case !stronger && !e.d.At.After(at): // an earlier one covers it
		e.d.Requests = d.Requests
		return time.Time{}, nil
	}
	var superseded time.Time
	if stronger {
		superseded = e.d.Tick
	}
	d.At, d.Claim = at, ""
	b.due[m] = &memDue{d: d}
	return superseded, nil
}

func (b *memDriver) Enqueue(_ context.Context, d driver.Due, delay time.Duration) (time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addDue(member{d.Task, d.Entity}, d, b.now().Add(delay))
}

func (b *memDriver) Take(_ context.Context, limit int, vis time.Duration, prefix string) ([]driver.Due, error) {
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
	out := make([]driver.Due, len(ready))
	for i, e := range ready {
		out[i] = e.d
		e.d.Claim = prefix + ":" + strconv.Itoa(i+1)
		e.d.At = now.Add(vis)
		out[i].Claim = e.d.Claim
	}
	return out, nil
}

func (b *memDriver) Ack(_ context.Context, d driver.Due) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ackLocked(member{d.Task, d.Entity}, d.Claim) {
		b.answerLocked(d.Task, d.Entity, d.Requests, driver.AnswerDropped)
	}
	return nil
}

func (b *memDriver) Answers(_ context.Context, task, id string) (map[string]driver.Outcome, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.answered[member{task, id}]), nil
}

func (b *memDriver) Forget(_ context.Context, task, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.answered, member{task, id})
	return nil
}
