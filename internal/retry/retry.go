// Package retry is how tickd waits between tries of what failed: a back-off
// that doubles from a first wait up to a ceiling and starts again after a
// success, waited on against a stop; and the jittered delay before a failed
// run's retry n.
package retry

import (
	"math/rand/v2"
	"time"
)

// Backoff is a wait that doubles at each failure, from First up to Max.
// The zero value waits nothing; set First and Max.
type Backoff struct {
	First, Max time.Duration
	next       time.Duration
}

// Next is the wait before the next try; the one after it is twice as long,
// up to Max.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.First
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	return d
}

// Reset starts again from First: the last try succeeded.
func (b *Backoff) Reset() { b.next = 0 }

// Wait waits d, or until done is closed, and reports whether d passed.
func Wait(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}

// Wait waits the next wait (Next), or until done is closed, and reports
// whether it passed.
func (b *Backoff) Wait(done <-chan struct{}) bool { return Wait(done, b.Next()) }

// Attempt is the delay before a failed run's retry n (1, 2, …): doubling
// from 1s, capped at 5m, with ±20% jitter so that the retries of a tick's
// many failed runs do not come back together.
func Attempt(n int) time.Duration {
	d := min(time.Second<<min(n-1, 9), 5*time.Minute)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
