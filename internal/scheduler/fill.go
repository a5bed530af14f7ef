package scheduler

import "time"

// fillWait bounds how long a fan-out out of run slots waits for one
// before it sends what its batch holds, while runs hold some of its
// task's slots: a run that ends meanwhile gives its slot to the batch. So
// a tick of short runs goes in batches of about its concurrency (up to
// driver.BatchSize) rather than of the slots that happened to be free: a
// script call costs Redis tens of µs whatever its size
// (docs/performance.md, "Fuller batches"). A batch waits at most that long
// for each slot, and only while a run may give one back.
const fillWait = time.Millisecond

// awaitFill waits up to fillWait for a run slot for the batch, when it
// holds some and runs hold others, and says whether it got one. On
// shutdown or a pause it gets none, and reserve finds why.
func (f *fanOut) awaitFill() bool {
	if len(f.batch) == 0 || len(f.ts.slots) <= len(f.batch) {
		return false
	}
	r, ok := f.slotWithin(fillWait)
	return ok && r == gotSlot
}

// slotWithin waits up to d for a run slot: gotSlot, or stopped when the
// fan-out's context ends first; false when d passed without either.
func (f *fanOut) slotWithin(d time.Duration) (reservation, bool) {
	if f.wait == nil {
		f.wait = time.NewTimer(d)
	} else {
		f.wait.Reset(d)
	}
	select {
	case f.ts.slots <- struct{}{}:
		f.wait.Stop()
		return gotSlot, true
	case <-f.ctx.Done():
		f.wait.Stop()
		return stopped, true
	case <-f.wait.C:
		return 0, false
	}
}
