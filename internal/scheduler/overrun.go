package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Go cannot stop a goroutine: a run's action is told to stop by its
// context (its lease lost or no longer trusted, an unlock, the task's
// timeout, a stop), and a Go handler that does not honour ctx goes on,
// while its entity may be run elsewhere once its lease expires. tickd
// cannot prevent that; it says so. A Go handler still going handlerGrace
// after its run's context was cancelled is logged at ERROR, once, with its
// fence, and counted (Metrics.Overran); and Stop does not wait for it
// longer than that grace (an exec run is killed, so it is waited for).

// handlerGrace is how long a Go handler has to return once its run's
// context is cancelled before it is said to overrun.
const handlerGrace = 2 * time.Second

const msgOverran = "run still going after it was stopped: its handler does not honour ctx, and its entity may run elsewhere meanwhile (docs/embedding.md)"

// overrunEvery is how often the runs going on are looked at.
const overrunEvery = 500 * time.Millisecond

// ErrRunsGoOn is returned by Stop when runs were still going a grace after
// they were stopped: Go handlers that do not honour their ctx.
var ErrRunsGoOn = errors.New("scheduler: runs still going after they were stopped (their Go handlers do not honour ctx)")

// watchOverruns looks for overrunning handlers every overrunEvery, from
// Start until the scheduler is stopped and every run has ended (one that
// outlives Stop is still reported).
func (s *Scheduler) watchOverruns() {
	t := time.NewTicker(overrunEvery)
	defer t.Stop()
	for now := range t.C {
		s.workers.overruns(now, false)
		if s.loopCtx.Err() != nil && s.active.Load() == 0 {
			return
		}
	}
}

// overruns reports each Go handler run handlerGrace past its cancellation
// (all runs going on, with all), once each; it returns how many runs are
// going on.
func (ws *workers) overruns(now time.Time, all bool) int {
	var over []*running
	going := 0
	ws.each(func(r *running) {
		going++
		stopped := r.ctx.Err() != nil
		if stopped && r.stoppedAt.IsZero() {
			r.stoppedAt = now
		}
		late := stopped && r.ts.t.Handler != "" && now.Sub(r.stoppedAt) >= handlerGrace
		if !r.overran && (late || all) {
			r.overran = true
			over = append(over, r)
		}
	})
	for _, r := range over {
		r.log.Error(msgOverran,
			"stopped_for", now.Sub(r.stoppedAt).Round(time.Millisecond).String(), "cause", fmt.Sprint(context.Cause(&r.ctx)))
		ws.s.metrics.Overran(r.ts.t.Name)
	}
	return going
}

// stopWait is how long Stop waits for the runs it stopped: handlerGrace,
// or longer for an exec run between its SIGTERM and its SIGKILL.
func (ws *workers) stopWait() time.Duration {
	d := handlerGrace
	ws.each(func(r *running) {
		if r.ts.t.Handler == "" {
			d = max(d, Grace(r.ts.t.LeaseTTL)+time.Second)
		}
	})
	return d
}
