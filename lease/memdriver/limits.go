package memdriver

import (
	"context"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// memLimit is one limit's state: the Go twin of redisdriver's limit keys.
type memLimit struct {
	holders map[string]time.Time           // holder → until its runs count
	runs    map[string]map[string]int      // holder → key → runs
	tat     map[string]time.Time           // key → the rate's theoretical arrival time
	closed  map[string]driver.LimitClosing // key → until when, why
}

func (b *Driver) limit(name string, now time.Time) *memLimit {
	if b.limits == nil {
		b.limits = map[string]*memLimit{}
	}
	l := b.limits[name]
	if l == nil {
		l = &memLimit{holders: map[string]time.Time{}, runs: map[string]map[string]int{}, tat: map[string]time.Time{}, closed: map[string]driver.LimitClosing{}}
		b.limits[name] = l
	}
	for h, until := range l.holders {
		if !now.Before(until) {
			delete(l.holders, h)
			delete(l.runs, h)
		}
	}
	for k, c := range l.closed {
		if !now.Before(c.Until) {
			delete(l.closed, k)
		}
	}
	return l
}

// TakeLimit is limit.lua's twin.
func (b *Driver) TakeLimit(_ context.Context, lim driver.Limit, holder string, ttl, _ time.Duration, keys []string) ([]driver.LimitGrant, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.limit(lim.Name, now)
	l.holders[holder] = now.Add(ttl)
	if l.runs[holder] == nil {
		l.runs[holder] = map[string]int{}
	}
	out := make([]driver.LimitGrant, len(keys))
	ival := lim.Interval()
	tolerance := time.Duration(max(lim.Burst, 1)-1) * ival
	late := map[string]int{}
	for i, k := range keys {
		if c, ok := l.closed[k]; ok {
			out[i] = driver.LimitGrant{Why: driver.LimitClosed, Wait: c.Until.Sub(now), Reason: c.Reason}
			continue
		}
		if lim.Concurrency > 0 {
			used := 0
			for _, rs := range l.runs {
				used += rs[k]
			}
			if used >= lim.Concurrency {
				out[i] = driver.LimitGrant{Why: driver.LimitFull}
				continue
			}
		}
		if ival > 0 {
			tat := l.tat[k]
			if tat.Before(now) {
				tat = now
			}
			if wait := tat.Sub(now) - tolerance; wait > 0 {
				// Later starts refused wait one interval more each.
				out[i] = driver.LimitGrant{Why: driver.LimitRate, Wait: wait + time.Duration(late[k])*ival}
				late[k]++
				continue
			}
			l.tat[k] = tat.Add(ival)
		}
		l.runs[holder][k]++
		out[i] = driver.LimitGrant{OK: true}
	}
	return out, nil
}

// SetLimitRuns is settle.lua's twin.
func (b *Driver) SetLimitRuns(_ context.Context, lim driver.Limit, holder string, ttl time.Duration, runs map[string]int, giveBack []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.limit(lim.Name, now)
	rs := map[string]int{}
	for k, n := range runs {
		if n > 0 {
			rs[k] = n
		}
	}
	if len(rs) > 0 {
		l.runs[holder], l.holders[holder] = rs, now.Add(ttl)
	} else {
		delete(l.runs, holder)
		delete(l.holders, holder)
	}
	for _, k := range giveBack {
		if tat, ok := l.tat[k]; ok {
			l.tat[k] = tat.Add(-lim.Interval())
		}
	}
	return nil
}

// CloseLimit closes a budget until now + d.
func (b *Driver) CloseLimit(_ context.Context, lim driver.Limit, key string, d time.Duration, why string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.limit(lim.Name, now).closed[key] = driver.LimitClosing{Until: now.Add(d), Reason: why}
	return nil
}

// LimitState reads a limit's runs and closed budgets.
func (b *Driver) LimitState(_ context.Context, lim driver.Limit) (driver.LimitState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.limit(lim.Name, b.now())
	st := driver.LimitState{Runs: map[string]map[string]int{}, Closed: map[string]driver.LimitClosing{}}
	for h, rs := range l.runs {
		st.Runs[h] = map[string]int{}
		for k, n := range rs {
			st.Runs[h][k] = n
		}
	}
	for k, c := range l.closed {
		st.Closed[k] = c
	}
	return st, nil
}
