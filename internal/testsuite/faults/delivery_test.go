package faults

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/lease/driver"
)

// checkDelivery judges what each tick of sync delivered, as its record
// says it, beside the locks. Each replica's final part accounts for every
// entity it read (a run, or a documented skip: busy, already ran, paused,
// …), and says "stopped" only when that replica was stopped or killed in
// the tick's time (a reload is no stop). On a quiet tick, the record says
// "already ran" of no entity that no run of the tick ran (the worker's
// records, and the runs the replicas logged that left none). A tick is
// quiet when no fault (a kill, a stop, a stall or freeze, Redis down or
// emptied) came within [T−ttl−every, T+3·every]: a killed replica's grants
// leave no run. Operator actions are no faults: a reload, a reshard, a
// pause, an unlock, a trigger are judged. Ticks near a data loss are not
// judged (their parts are lost).
func (c *cluster) checkDelivery(res *result, begin, end time.Time) {
	c.mu.Lock()
	faults, stops := c.faultTimes()
	losses := slices.Clone(c.losses)
	procs := slices.Clone(c.procs)
	runs := tickdtest.ReadRuns(c.t, c.runsLog)
	holds, _ := unrecorded(runs, c.readLogs(), c.ttl)
	c.mu.Unlock()
	// stopped says whether replica (a part's) was stopped or killed in
	// [from, to]: its id is its process's name (the nemesis's) or ends in
	// its pid (the default id).
	stopped := func(replica string, from, to time.Time) bool {
		for _, p := range procs {
			s, ok := stops[p.Pid()]
			if ok && (replica == p.Name || strings.HasSuffix(replica, "-"+strconv.Itoa(p.Pid()))) && !s.from.After(to) && !s.to.Before(from) {
				return true
			}
		}
		return false
	}
	ran := ranByTick(append(runs, holds...))
	for _, rec := range tickdtest.TicksIn(c.t, c.readStore(), "sync", 1000) {
		T := rec.Tick
		if T.Before(begin) || T.After(end) || !rec.Final() || c.nearLoss(T, losses) {
			continue
		}
		res.deliveryJudged++
		// A part written later than the tick's time (a catch-up's fan-out)
		// was stopped by a stop near its writing.
		why := delivered(rec, len(ran[T.UnixNano()]), quiet(faults, T.Add(-c.ttl-every), T.Add(3*every)),
			func(p driver.TickPart) bool {
				return stopped(p.Replica, T.Add(-every), latest(T.Add(3*every), p.Written))
			})
		if why != "" {
			res.deliveryWrong++
			if len(res.Examples) < 20 {
				res.Examples = append(res.Examples, fmt.Sprintf("tick %s delivered wrong: %s; parts %+v", T.UTC().Format(time.RFC3339), why, rec.Parts))
			}
		}
	}
}

// faultTimes are the faults injected so far, and by tickd pid the time
// from its SIGTERM (or kill) to its end. c.mu is held.
func (c *cluster) faultTimes() (faults []interval, stops map[int]interval) {
	stops = map[int]interval{}
	for pid, at := range c.killedAt {
		stops[pid] = interval{time.Unix(0, at), time.Unix(0, at)}
	}
	for pid, sent := range c.stopping { // until it ended, or for a while
		to, ok := c.exited[pid]
		if !ok {
			to = sent + (30 * time.Second).Nanoseconds()
		}
		stops[pid] = interval{time.Unix(0, sent), time.Unix(0, to)}
	}
	for pid, at := range c.exited {
		if _, ok := stops[pid]; !ok {
			stops[pid] = interval{time.Unix(0, at), time.Unix(0, at)}
		}
	}
	for _, s := range stops {
		faults = append(faults, s)
	}
	for _, l := range c.linger {
		faults = append(faults, l)
	}
	for _, at := range c.losses {
		faults = append(faults, interval{at, at})
	}
	return append(append(faults, c.blackouts...), c.redisDown...), stops
}

// ranByTick is, by tick, the entities of sync some run of the tick ran:
// its own, its hand-overs, and the runs the replicas logged.
func ranByTick(runs []tickdtest.Run) map[int64]map[string]bool {
	ran := map[int64]map[string]bool{}
	for _, r := range runs {
		switch r.Start.Reason {
		case "tick", "retry", "queued", "catch_up", unrecordedReason:
		default:
			continue
		}
		T, err := time.Parse(time.RFC3339Nano, r.Start.Tick)
		if r.Start.Task != "sync" || err != nil {
			continue
		}
		if ran[T.UnixNano()] == nil {
			ran[T.UnixNano()] = map[string]bool{}
		}
		ran[T.UnixNano()][r.Start.Entity] = true
	}
	return ran
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// quiet says whether no fault meets [from, to].
func quiet(faults []interval, from, to time.Time) bool {
	for _, f := range faults {
		if !f.from.After(to) && !f.to.Before(from) {
			return false
		}
	}
	return true
}

// delivered says what is wrong with tick record rec, of which ran
// entities were run, on a quiet tick or not, whose replicas were stopped
// in its time as stopped says: "" when nothing is.
func delivered(rec driver.TickRecord, ran int, quiet bool, stopped func(p driver.TickPart) bool) string {
	for _, p := range rec.Parts {
		if p.Entities == 0 { // a late part: runs that waited, counted where they ran
			continue
		}
		accounted := p.Started
		for _, n := range p.Skipped {
			accounted += n
		}
		switch {
		case accounted != p.Entities:
			return fmt.Sprintf("%s's part accounts for %d of its %d entities (started %d, skipped %v)", p.Replica, accounted, p.Entities, p.Started, p.Skipped)
		case p.Skipped[history.SkipStopped] > 0 && !stopped(p):
			return fmt.Sprintf("%s's part says %d entities were not come to (stopped), with no stop of a replica near the tick", p.Replica, p.Skipped[history.SkipStopped])
		}
	}
	// A part's already_ran is mostly another part's runs (a chunk another
	// replica took); the record's is what no part ran nor skipped otherwise
	// (TickRecord.Skipped): runs of the tick the parts do not count (a
	// hand-over that ran elsewhere) may explain it, nothing else.
	if n := rec.Skipped()[driver.SkipAlreadyRan]; quiet && n > max(0, ran-rec.Runs()) {
		return fmt.Sprintf("the record says %d entities already ran, and runs of the tick ran %d, %d of them counted in the record", n, ran, rec.Runs())
	}
	return ""
}

// TestDelivered: the delivery judge on synthetic records, a rule a case.
func TestDelivered(t *testing.T) {
	part := func(replica string, entities, started int, skipped map[string]int) driver.TickPart {
		return driver.TickPart{Replica: replica, Final: true, Entities: entities, Started: started,
			Outcomes: map[driver.Outcome]int{driver.OutcomeDone: started}, Skipped: skipped}
	}
	for _, c := range []struct {
		name  string
		parts []driver.TickPart
		ran   int
		wrong bool
	}{
		{"every entity run or skipped busy", []driver.TickPart{part("r0", 10, 8, map[string]int{"busy": 2})}, 8, false},
		{"a part that does not account for its entities", []driver.TickPart{part("r0", 10, 7, map[string]int{"busy": 2})}, 7, true},
		{"stopped with no stop near (a reload)", []driver.TickPart{part("r0", 10, 4, map[string]int{history.SkipStopped: 6})}, 4, true},
		{"one replica: already ran where no run ran", []driver.TickPart{part("r0", 2, 0, map[string]int{driver.SkipAlreadyRan: 2})}, 0, true},
		{"one replica: already ran by its hand-overs", []driver.TickPart{part("r0", 2, 0, map[string]int{driver.SkipAlreadyRan: 2})}, 2, false},
		{"chunks another replica took, busy there", []driver.TickPart{
			part("r0", 10, 3, map[string]int{driver.SkipAlreadyRan: 5, "busy": 2}),
			part("r1", 10, 2, map[string]int{driver.SkipAlreadyRan: 5, "busy": 3}),
		}, 5, false},
		{"a late part (runs that waited) is not judged alone", []driver.TickPart{
			part("r0", 10, 10, nil), {Replica: "r1", Final: true, Started: 1, Skipped: map[string]int{driver.SkipLimited: -1}},
		}, 11, false},
	} {
		why := delivered(driver.TickRecord{Parts: c.parts}, c.ran, true, func(driver.TickPart) bool { return false })
		expect.Equal(t, fmt.Sprintf("%s: judged wrong (%q)", c.name, why), why != "", c.wrong)
	}
	// A replica stopped in the tick's time may say stopped; a tick near a
	// fault is not judged on already_ran (a killed replica's grants).
	stoppedPart := []driver.TickPart{part("r0", 10, 4, map[string]int{history.SkipStopped: 6})}
	expect.Equal(t, "stopped, its replica stopped", delivered(driver.TickRecord{Parts: stoppedPart}, 4, true, func(p driver.TickPart) bool { return p.Replica == "r0" }), "")
	ranPart := []driver.TickPart{part("r0", 2, 0, map[string]int{driver.SkipAlreadyRan: 2})}
	expect.Equal(t, "already ran near a fault", delivered(driver.TickRecord{Parts: ranPart}, 0, false, func(driver.TickPart) bool { return false }), "")
}
