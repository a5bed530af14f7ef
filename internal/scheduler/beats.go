package scheduler

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/heartbeat"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/lease/driver"
)

// Heartbeats (internal/heartbeat, docs/operations.md "Heartbeats"): a task
// with a heartbeat_url pings its monitor's check when a tick's fan-out
// starts, and again when the tick is over. Every replica that fans a tick
// out keeps it open here and judges it from its record in the history:
// when its own part of the tick is written final, and every beatPoll while
// any is open (another replica's part ends later; a replica that is gone
// leaves the tick incomplete). The first replica to see it over claims and
// sends the end. Nothing here is on the run path: a fan-out only queues
// its start, and the judging reads the store in a goroutine of its own.

// beats keeps the open ticks of this replica's tasks with a heartbeat_url.
type beats struct {
	s    *Scheduler
	send *heartbeat.Sender

	mu   sync.Mutex
	open map[tallyKey]openBeat
	wake chan struct{}
	// stop ends the loop after a last judging; done is closed when it has.
	stop context.CancelFunc
	done chan struct{}
}

// openBeat is a tick whose start was queued and whose end is not judged.
type openBeat struct {
	task, url string
	tick      time.Time
	keep      time.Duration // how long the pings' claims hold
	until     time.Time     // judged no longer after this: the monitor's grace says it
}

// beatPoll is how often the open ticks are judged besides when this
// replica's part of one is written final.
const beatPoll = 10 * time.Second

func newBeats(s *Scheduler) *beats {
	return &beats{s: s, open: map[tallyKey]openBeat{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// start starts the sender and the judging loop; finish stops them.
func (b *beats) start() {
	ctx, cancel := context.WithCancel(context.Background())
	ua := "tickd"
	if v := b.s.version; v != "" {
		ua += "/" + v
	}
	b.send = heartbeat.New(ctx, heartbeat.Options{Claim: b.s.store.Fleet().Claim, Log: b.s.log, UserAgent: ua})
	lctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	go func() {
		defer close(b.done)
		b.loop(lctx)
		b.judge(2 * time.Second) // the parts the stop's flush wrote last
		waitAtMost(b.send.Wait, 2*time.Second)
		cancel()
		b.send.Wait()
	}()
}

// finish judges the open ticks once more and waits, at most about 4s, for
// the pings under way.
func (b *beats) finish() {
	if b.stop != nil {
		b.stop()
		<-b.done
	}
}

// waitAtMost calls wait, and returns when it has or after d.
func waitAtMost(wait func(), d time.Duration) {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// began queues the start of tick T of t, when t has a heartbeat_url, and
// keeps the tick open.
func (b *beats) began(t *config.Task, T time.Time) {
	if t.HeartbeatURL == "" || b.send == nil {
		return
	}
	// The end may be sent as late as the tick may start, plus a run's
	// longest: the claims hold that long, and a little more.
	within := t.LateLimit() + t.Timeout + 5*time.Minute
	ob := openBeat{task: t.Name, url: t.HeartbeatURL, tick: T, keep: within + 5*time.Minute, until: T.Add(within)}
	b.mu.Lock()
	b.open[tallyKey{t.Name, T.UnixNano(), ""}] = ob
	b.mu.Unlock()
	b.send.Send(heartbeat.Ping{Task: t.Name, URL: ob.url, Tick: T, Kind: heartbeat.Start, Keep: ob.keep})
}

// wrote hears of parts the history wrote: a final one of an open tick has
// it judged.
func (b *beats) wrote(parts map[tallyKey]driver.TickWrite) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, w := range parts {
		if _, ok := b.open[k]; ok && w.Part.Final {
			select {
			case b.wake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// loop judges the open ticks when woken, and every beatPoll while any is
// open.
func (b *beats) loop(ctx context.Context) {
	t := time.NewTicker(beatPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-t.C:
		}
		b.judge(5 * time.Second)
	}
}

// judge reads the records of the open ticks, sends the end of each that is
// over, and forgets those judged too long.
func (b *beats) judge(timeout time.Duration) {
	b.mu.Lock()
	open := maps.Clone(b.open)
	b.mu.Unlock()
	if len(open) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	byTask := map[string][]openBeat{}
	for _, ob := range open {
		byTask[ob.task] = append(byTask[ob.task], ob)
	}
	var live map[string]bool // read once, when a record is not final
	now := b.s.clock.Now()
	for task, obs := range byTask {
		recs, err := b.s.store.Fleet().Ticks(ctx, task, maxOpenTicks)
		if err != nil {
			b.s.logLimited("heartbeat-read", "cannot read the history to judge heartbeats; will retry", logs.KeyTask, task, logs.KeyError, err)
			continue
		}
		for _, ob := range obs {
			r, found := recordOf(recs, ob.tick)
			if found && !r.Final() && live == nil {
				if live = b.live(ctx); live == nil {
					continue // which replicas are gone is not known: judged next time
				}
			}
			state := ""
			if found {
				state = history.State(r, live)
			}
			switch {
			case state == history.TickComplete || state == history.TickIncomplete:
				ok, summary := history.Summary(task, r, state, live)
				kind := heartbeat.Fail
				if ok {
					kind = heartbeat.Success
				} else if fs, err := b.s.store.Fleet().Failures(ctx, task, failuresRead); err == nil {
					summary += history.FailedEntities(fs, ob.tick, failuresNamed) // which entities failed, when some did
				}
				b.send.Send(heartbeat.Ping{Task: task, URL: ob.url, Tick: ob.tick, Kind: kind, Body: summary, Keep: ob.keep})
			case now.After(ob.until):
				b.s.log.Debug("heartbeat: the tick is still not over; the monitor's grace says so", logs.KeyTask, task, logs.Tick(ob.tick))
			default:
				continue
			}
			b.mu.Lock()
			delete(b.open, tallyKey{task, ob.tick.UnixNano(), ""})
			b.mu.Unlock()
		}
	}
}

// maxOpenTicks is how many of a task's newest tick records judge reads.
const maxOpenTicks = 100

// A failing tick's end names at most failuresNamed of its failed
// entities, read among the task's failuresRead newest failures.
const (
	failuresRead  = 100
	failuresNamed = 10
)

// live is the replicas whose announcement is current (nil when they cannot
// be read: no tick is then taken for incomplete).
func (b *beats) live(ctx context.Context) map[string]bool {
	rs, err := b.s.store.Fleet().Replicas(ctx)
	if err != nil {
		return nil
	}
	m := make(map[string]bool, len(rs))
	for _, r := range rs {
		m[r.ID] = true
	}
	return m
}

// recordOf finds tick T's record in recs.
func recordOf(recs []driver.TickRecord, T time.Time) (driver.TickRecord, bool) {
	for _, r := range recs {
		if r.Tick.Equal(T) {
			return r, true
		}
	}
	return driver.TickRecord{}, false
}
