package memdriver

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// memLimit is one limit's state: the Go twin of redisdriver's limit keys.
type memLimit struct {
	holders map[string]time.Time           // holder → until its runs count
	runs    map[string]map[string]int      // holder → key → runs
	tat     map[string]time.Time           // key → the rate's theoretical arrival time
	closed  map[string]driver.LimitClosing // key → until when, why
	line    map[string]map[string]waiter   // key → waiter → its place
	fair    map[string]*fairLine           // key → its groups, for a fair limit
	auto    map[string]*autoRate           // key → its learned rate, for an auto limit
	bound   map[string]time.Time           // key → when a run near its head was refused for its rate
}

// waiter is a run's place in a limit's line: since when it waits, and
// until when it keeps its place (zero: just placed, kept for this call).
type waiter struct{ since, until time.Time }

func (b *memDriver) limit(name string, now time.Time) *memLimit {
	if b.limits == nil {
		b.limits = map[string]*memLimit{}
	}
	l := b.limits[name]
	if l == nil {
		l = &memLimit{holders: map[string]time.Time{}, runs: map[string]map[string]int{}, tat: map[string]time.Time{}, closed: map[string]driver.LimitClosing{},
			line: map[string]map[string]waiter{}, bound: map[string]time.Time{}}
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
	for k, ws := range l.line {
		for w, x := range ws {
			if !x.until.IsZero() && now.After(x.until) {
				l.leave(k, w, true)
			}
		}
	}
	return l
}

// TakeLimit is limit.lua's twin.
func (b *memDriver) TakeLimit(_ context.Context, lim driver.Limit, ttl time.Duration, asks []driver.LimitAsk) ([]driver.LimitGrant, error) {
	holder := b.cfg.Holder
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l := b.limit(lim.Name, now)
	l.holders[holder] = now.Add(ttl)
	if l.runs[holder] == nil {
		l.runs[holder] = map[string]int{}
	}
	l.placeAll(lim, asks, now)
	out := make([]driver.LimitGrant, len(asks))
	c := &limitCall{l: l, lim: lim, now: now,
		room: map[string][2]int{}, tat0: map[string]time.Time{}, used: map[string]bool{}, granted: map[[2]string]bool{}, heads: map[string]map[string]string{}}
	for i, a := range asks {
		k := a.Key
		if cl, ok := l.closed[k]; ok {
			out[i] = driver.LimitGrant{Why: driver.LimitClosed, Wait: cl.Until.Sub(now), Reason: cl.Reason}
			l.line[k][a.Waiter] = waiter{l.line[k][a.Waiter].since, now.Add(out[i].Wait + driver.LimitWaitGrace)}
			continue
		}
		ok, rank, free := c.decide(a)
		ival := l.interval(lim, k)
		tolerance := time.Duration(max(lim.Burst, 1)-1) * ival
		switch {
		case ok:
			out[i] = driver.LimitGrant{OK: true}
			c.granted[[2]string{k, a.Waiter}] = true
			if ival > 0 {
				l.tat[k] = later(l.tat[k], now).Add(ival)
			}
			l.runs[holder][k]++
			continue
		case rank >= free || ival == 0:
			out[i] = driver.LimitGrant{Why: driver.LimitFull, Wait: driver.FullWait(max(rank-free, 0), lim.Concurrency)}
		default:
			// A fair line's rank is a least: a run told too soon asks again.
			ahead := time.Duration(rank) * ival
			if lim.Auto { // the rate may rise meanwhile
				ahead = l.autoWait(k, rank, lim.Burst, ival, now, c.used[k])
			}
			wait := ceilMs(c.tat0[k].Add(ahead - tolerance).Sub(now))
			if lim.Fair {
				wait = max(wait, ceilMs(ival))
			}
			out[i] = driver.LimitGrant{Why: driver.LimitRate, Wait: wait}
		}
		l.line[k][a.Waiter] = waiter{l.line[k][a.Waiter].since, now.Add(out[i].Wait + driver.LimitWaitGrace)}
	}
	for g := range c.granted {
		l.leave(g[0], g[1], false)
	}
	for _, f := range l.fair {
		f.callDone()
	}
	return out, nil
}

// placeAll puts every ask in its line first, so that the ranks after are
// one line's: at its since less its head start, the older kept.
func (l *memLimit) placeAll(lim driver.Limit, asks []driver.LimitAsk, now time.Time) {
	for _, a := range asks {
		since := a.Since
		if since.IsZero() {
			since = now
		}
		since = since.Add(-a.HeadStart.Truncate(time.Millisecond))
		if lim.Fair {
			l.fairLine(a.Key).place(a, now)
		}
		if cur, ok := l.line[a.Key][a.Waiter]; !ok || since.Before(cur.since) {
			l.place(a.Key, a.Waiter, since, cur.until)
		}
	}
}

// limitCall is what one TakeLimit call reads once: each key's room (free
// places, starts the rate allows) and rate's arrival time, the starts it
// granted, and each fair line's first runs (→ their group).
type limitCall struct {
	l       *memLimit
	lim     driver.Limit
	now     time.Time
	room    map[string][2]int
	tat0    map[string]time.Time
	used    map[string]bool // limit.lua's used
	granted map[[2]string]bool
	heads   map[string]map[string]string
}

// decide says whether a gets a start, else how many runs are ahead of it
// (at least), and its key's free places.
func (c *limitCall) decide(a driver.LimitAsk) (ok bool, rank, free int) {
	k, l := a.Key, c.l
	if _, ok := c.room[k]; !ok {
		c.room[k], c.tat0[k], c.used[k] = l.room(c.lim, k, c.now)
	}
	free, avail := c.room[k][0], c.room[k][1]
	switch {
	case c.granted[[2]string{k, a.Waiter}]: // one task and entity asked twice: once
		return false, math.MaxInt, free
	case c.lim.Fair:
		f := l.fair[k]
		if c.heads[k] == nil {
			c.heads[k] = f.head(l.line[k], min(free, avail, driver.FairHead))
		}
		if g, in := c.heads[k][a.Waiter]; in {
			f.granted(g, c.now)
			return true, 0, free
		}
		return false, f.rank(l.line[k], a.Waiter), free
	}
	rank = l.rank(k, a.Waiter)
	return rank < free && rank < avail, rank, free
}

// leave takes waiter w out of key's line, and out of its group's: granted,
// or gone (keep: it keeps its group).
func (l *memLimit) leave(key, w string, keep bool) {
	delete(l.line[key], w)
	if f := l.fair[key]; f != nil {
		f.out(w, keep)
	}
}

// ceilMs rounds d up to a millisecond, as the scripts' waits are.
func ceilMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// place puts waiter in key's line.
func (l *memLimit) place(key, w string, since, until time.Time) {
	if l.line[key] == nil {
		l.line[key] = map[string]waiter{}
	}
	l.line[key][w] = waiter{since, until}
}

// room is key's free places under the concurrency and the starts the rate
// allows now (math.MaxInt for none), the rate's arrival time, and whether
// starts went at the rate until now (limit.lua's used).
func (l *memLimit) room(lim driver.Limit, key string, now time.Time) ([2]int, time.Time, bool) {
	ival := l.interval(lim, key)
	tolerance := time.Duration(max(lim.Burst, 1)-1) * ival
	r := [2]int{math.MaxInt, math.MaxInt}
	if lim.Concurrency > 0 {
		used := 0
		for _, rs := range l.runs {
			used += rs[key]
		}
		r[0] = max(lim.Concurrency-used, 0)
	}
	tat := l.tat[key] // kept as the last start left it, as limit.lua keeps it
	used := tat.After(now.Add(-ival))
	if tat.Before(now) {
		tat = now
	}
	if ival > 0 {
		r[1] = 0
		if !now.Add(tolerance).Before(tat) {
			r[1] = int(now.Add(tolerance).Sub(tat)/ival) + 1
		}
	}
	return r, tat, used
}

// rank is w's place in key's line: the older since first, then the lower
// waiter (as a zset orders its members).
func (l *memLimit) rank(key, w string) int {
	me := l.line[key][w]
	n := 0
	for o, x := range l.line[key] {
		if x.since.Before(me.since) || x.since.Equal(me.since) && o < w {
			n++
		}
	}
	return n
}

// SetLimitRuns is settle.lua's twin.
func (b *memDriver) SetLimitRuns(_ context.Context, lim driver.Limit, ttl time.Duration, runs map[string]int, giveBack []string) error {
	holder := b.cfg.Holder
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
func (b *memDriver) CloseLimit(_ context.Context, lim driver.Limit, key string, d time.Duration, why string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.limit(lim.Name, now).closed[key] = driver.LimitClosing{Until: now.Add(d), Reason: why}
	return nil
}

// LimitState reads a limit's runs and closed budgets.
func (b *memDriver) LimitState(_ context.Context, lim driver.Limit) (driver.LimitState, error) {
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
	for _, ws := range l.line {
		for w, x := range ws {
			st.Waiting++
			st.Oldest = append(st.Oldest, driver.LimitWaiting{Waiter: w, Since: x.since})
		}
	}
	slices.SortFunc(st.Oldest, func(a, b driver.LimitWaiting) int { return a.Since.Compare(b.Since) })
	st.Oldest = st.Oldest[:min(len(st.Oldest), driver.MaxOldest)]
	if f := l.fair[""]; lim.Fair && f != nil {
		f.state(l.line[""], b.now(), &st)
	}
	if a := l.auto[""]; lim.Auto && a != nil {
		st.Rate, st.RateSource = a.rate, a.src
	}
	return st, nil
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
