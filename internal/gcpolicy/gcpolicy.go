// Package gcpolicy is the daemon's garbage collector policy (docs/operations.md,
// "Memory and the garbage collector"). A tick allocates about 1.6 KB per run and keeps little:
// with Go's default, GOGC=100, a 5 MB live heap is collected every 5 MB
// allocated, about 50 times in a 100,000-entity tick, and the collector was
// a fifth of the daemon's CPU. Under this policy the heap grows to five
// times what is live while that stays small, and to twice what is live, as
// with the default, once the live heap passes half of Floor: a 1,000,000-
// entity daemon stays within its memory target.
package gcpolicy

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

const (
	// Percent is the GOGC the daemon runs with.
	Percent = 400
	// Floor is the least soft memory limit (GOMEMLIMIT) the daemon sets.
	Floor = 64 << 20
	// every is how often the limit follows the live heap.
	every = time.Second
)

// Limit is the soft memory limit for a live heap of live bytes: Floor, or
// twice the live heap once that is more.
func Limit(live uint64) int64 {
	if live > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return max(Floor, 2*int64(live))
}

// Policy is the policy in force between Start and Stop.
type Policy struct {
	stop    context.CancelFunc // nil: not applied
	done    chan struct{}
	percent int   // the GOGC Start found, restored by Stop
	limit   int64 // the memory limit Start found, restored by Stop
}

// Start sets GOGC to Percent and a soft memory limit of Limit(live heap),
// which follows the live heap every second until Stop. When the
// environment sets GOGC or GOMEMLIMIT, the operator's choice stands and
// the policy changes nothing. ctx bounds the start only. A second Start
// does nothing.
func (p *Policy) Start(context.Context) error {
	if p.stop != nil || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	p.percent, p.limit = debug.SetGCPercent(Percent), debug.SetMemoryLimit(-1)
	update()
	ctx, stop := context.WithCancel(context.Background())
	p.stop, p.done = stop, make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				update()
			}
		}
	}()
	return nil
}

// Stop stops following the live heap and restores GOGC and the memory
// limit Start found.
func (p *Policy) Stop(context.Context) error {
	if p.stop == nil {
		return nil
	}
	p.stop()
	<-p.done // at most one update away
	p.stop = nil
	debug.SetGCPercent(p.percent)
	debug.SetMemoryLimit(p.limit)
	return nil
}

// update sets the soft memory limit for the live heap the last collection
// found.
func update() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		debug.SetMemoryLimit(Limit(s[0].Value.Uint64()))
	}
}
