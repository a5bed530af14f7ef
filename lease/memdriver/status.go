package memdriver

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

func (b *memDriver) Unlock(_ context.Context, task, entity, by string, force bool) (driver.Unlocked, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := member{task, entity}
	now := b.now()
	b.gc(m, now)
	cur, ok := b.held[m]
	if !ok {
		return driver.Unlocked{}, false, nil
	}
	u := driver.Unlocked{Held: driver.Held{Task: task, Entity: entity, Holder: cur.holder, Since: cur.since, Fence: cur.fence,
		Reason: cur.reason, TTL: cur.expire.Sub(now), Revoked: cur.revoked}}
	switch {
	case force:
		delete(b.held, m)
		st := b.state(m, now)
		st.last = driver.LastRun{Outcome: driver.OutcomeUnlocked, Started: cur.since, Ended: now, Fence: cur.fence, Reason: cur.reason, Replica: cur.holder, By: by}
		u.Freed = true
	case cur.revoked:
		u.Already = true
	default:
		cur.revoked = true
	}
	return u, true, nil
}

// Claim says yes the first time name is claimed within ttl: one process,
// but a reload may ask twice.
func (b *memDriver) Claim(_ context.Context, name string, ttl time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	maps.DeleteFunc(b.claims, func(_ string, until time.Time) bool { return !until.After(now) })
	if _, ok := b.claims[name]; ok {
		return false, nil
	}
	b.claims[name] = now.Add(ttl)
	return true, nil
}

func (b *memDriver) Sweep(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for m := range b.states {
		b.gc(m, now)
	}
	for m := range b.held {
		b.gc(m, now)
	}
	maps.DeleteFunc(b.ran, func(_ ranKey, until time.Time) bool { return !until.After(now) })
	return nil
}

// sortedMembers lists the members of one task ("" for all) in a stable
// order: by task, then by entity.
func sortedMembers[V any](mp map[member]V, task string) []member {
	var ms []member
	for m := range mp {
		if task == "" || m.task == task {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b member) int { return cmp.Or(cmp.Compare(a.task, b.task), cmp.Compare(a.entity, b.entity)) })
	return ms
}

func (b *memDriver) Leases(_ context.Context, task string, fn func(driver.Held) error) error {
	b.mu.Lock()
	now := b.now()
	var hs []driver.Held
	for _, m := range sortedMembers(b.held, task) {
		b.gc(m, now)
		l, ok := b.held[m]
		if !ok {
			continue
		}
		t, e := m.task, m.entity
		hs = append(hs, driver.Held{Task: t, Entity: e, Holder: l.holder, Since: l.since, Fence: l.fence, Reason: l.reason, TTL: l.expire.Sub(now), Revoked: l.revoked})
	}
	b.mu.Unlock()
	for _, h := range hs {
		if err := fn(h); err != nil {
			return err
		}
	}
	return nil
}

func (b *memDriver) LastRuns(_ context.Context, task string, fn func(driver.LastRun) error) error {
	b.mu.Lock()
	var rs []driver.LastRun
	for _, m := range sortedMembers(b.states, task) {
		s := b.states[m]
		if s.last.Outcome == "" {
			continue
		}
		r := s.last
		r.Task, r.Entity = m.task, m.entity
		r.LastTick = s.tick
		rs = append(rs, r)
	}
	b.mu.Unlock()
	for _, r := range rs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (b *memDriver) DueEntries(_ context.Context, task string, fn func(driver.Due) error) error {
	b.mu.Lock()
	ds := make([]driver.Due, 0, len(b.due))
	for _, e := range b.due {
		if task == "" || e.d.Task == task {
			ds = append(ds, e.d)
		}
	}
	b.mu.Unlock()
	sort.Slice(ds, func(i, j int) bool { return ds[i].At.Before(ds[j].At) })
	for _, d := range ds {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

func (b *memDriver) One(_ context.Context, task, entity string) (driver.EntityState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.oneLocked(task, entity, b.now()), nil
}

// oneLocked is one's, with b.mu held.
func (b *memDriver) oneLocked(task, entity string, now time.Time) driver.EntityState {
	m := member{task, entity}
	b.gc(m, now)
	var st driver.EntityState
	if l, ok := b.held[m]; ok {
		st.Held = &driver.Held{Task: task, Entity: entity, Holder: l.holder, Since: l.since, Fence: l.fence, Reason: l.reason, TTL: l.expire.Sub(now), Revoked: l.revoked}
	}
	if s, ok := b.states[m]; ok && s.last.Outcome != "" {
		r := s.last
		r.Task, r.Entity, r.LastTick = task, entity, s.tick
		st.Last = &r
	}
	if e, ok := b.due[m]; ok {
		d := e.d
		st.Pending = &d
	}
	return st
}

func (b *memDriver) DueCount(context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.due), nil
}

// CheckEpochs finds nothing: the process's memory cannot lose its data
// and keep running.
func (b *memDriver) CheckEpochs(context.Context) (time.Duration, error) {
	return 0, nil
}

func (b *memDriver) Taken(_ context.Context, _ string, _ time.Time, chunks []string) ([]bool, error) {
	return make([]bool, len(chunks)), nil
}
