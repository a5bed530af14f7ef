package lease

import (
	"time"

	"github.com/tickd/tickd/internal/codec"
)

// trustGroup is leases whose trust windows end at the same instant, watched
// by one timer: the leases of one TTL granted by one acquire round trip, or
// renewed by one renewal round. A lease is in one group at a time: a renewal
// moves it to the round's group, a drop takes it out, and the timer of a
// group left empty is stopped. Store.mu guards groups and Lease.group/slot.
type trustGroup struct {
	at    time.Time
	timer *time.Timer
	ls    []*Lease // nil where a lease left
	live  int
}

// watchLocked puts ls, held leases whose trust windows all end at at, in a
// new group, which keeps ls, and arms its timer. Call with s.mu held.
func (k *keeper) watchLocked(at time.Time, ls []*Lease) {
	g := &trustGroup{at: at, ls: ls, live: len(ls)}
	for i, l := range ls {
		k.leaveLocked(l)
		l.group, l.slot = g, i
	}
	// A window that already ended fires at once; expire waits for k.mu.
	g.timer = time.AfterFunc(at.Sub(k.clock.Now()), func() { k.expire(g) })
}

// watchAllLocked watches held leases that were granted or renewed by one
// request sent at sent, one group per TTL. Call with s.mu held.
func (k *keeper) watchAllLocked(sent time.Time, ls []*Lease) {
	for _, g := range codec.GroupBy(len(ls), func(i int) time.Duration { return ls[i].d.TTL }) {
		sub := ls
		if len(g.Idx) < len(ls) {
			sub = make([]*Lease, len(g.Idx))
			for k, i := range g.Idx {
				sub[k] = ls[i]
			}
		}
		k.watchLocked(trustEnd(sent, g.Key), sub)
	}
}

// leaveLocked takes l out of its group; the last one out stops the group's
// timer. Call with s.mu held.
func (k *keeper) leaveLocked(l *Lease) {
	g := l.group
	if g == nil {
		return
	}
	g.ls[l.slot], l.group = nil, nil
	if g.live--; g.live == 0 {
		g.timer.Stop()
	}
}

// expire runs when a group's trust windows end: its leases, not renewed in
// time, are dropped as untrusted.
func (k *keeper) expire(g *trustGroup) {
	k.mu.Lock()
	now := k.clock.Now()
	if left := g.at.Sub(now); left > 0 && g.live > 0 {
		// The store's clock (tests inject one) is behind the timer's.
		g.timer.Reset(left)
		k.mu.Unlock()
		return
	}
	var ls []*Lease
	for _, l := range g.ls {
		if l != nil {
			ls = append(ls, l)
		}
	}
	k.mu.Unlock()
	for _, l := range ls {
		k.dropIfUntrusted(l, now) // a round that ended just now may have renewed it
	}
}

// dropIfUntrusted drops l, cause ErrUntrusted, when its trust window has
// ended by now.
func (k *keeper) dropIfUntrusted(l *Lease, now time.Time) {
	l.mu.Lock()
	ended := !now.Before(l.trusted)
	l.mu.Unlock()
	if ended {
		k.drop(l, ErrUntrusted)
	}
}
