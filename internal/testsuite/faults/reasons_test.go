package faults

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"

	tickdconfig "github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/heartbeat"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// Every scenario ends with two more judgements, of what an operator and an
// outside monitor see:
//   - a reason for every tick the schedule expected (history.Reason), as
//     `tickd history -json` gives it: none may be without one, and none
//     may say missed or paused while the worker recorded runs of it;
//   - the heartbeats (heartbeat_url, to the cluster's monitor): each tick's
//     start and end heard at most once, the start first, and the start of
//     every tick judged for liveness heard.
//
// A Redis restarted empty forgets the claims and the records of the ticks
// just before it: the ticks from a minute before a data loss to a lease
// TTL after it are excused from both.

// beatsConfig is the [defaults] table that gives every task of the
// cluster a heartbeat to its monitor.
func (c *cluster) beatsConfig() string {
	return fmt.Sprintf("\n[defaults]\nheartbeat_url = %q\n", c.mon.URL+"/{task}")
}

// nearLoss says whether tick T is excused: Redis lost its data from a
// minute after it to a lease TTL before it.
func (c *cluster) nearLoss(T time.Time, losses []time.Time) bool {
	return slices.ContainsFunc(losses, func(l time.Time) bool { return T.After(l.Add(-time.Minute)) && T.Before(l.Add(c.ttl+every)) })
}

// checkReasons judges the reason of each tick of sync the schedule
// expected in [begin+every, end-2*every].
func (c *cluster) checkReasons(res *result, begin, end time.Time) {
	b, err := os.ReadFile(c.reps[0].cfg)
	if err != nil {
		expect.Fatalf(c.t, "%v", err)
	}
	cfg, err := tickdconfig.Parse(c.reps[0].cfg, b)
	if err != nil {
		expect.Fatalf(c.t, "%v", err)
	}
	task, _ := cfg.Task("sync")
	past, err := history.ReadPast(context.Background(), c.readStore(), task, 1000)
	if err != nil {
		expect.Fatalf(c.t, "%v", err)
	}
	// Every replica has stopped: each tick up to end is due, or over.
	views, _ := history.Assess(task, end.Add(task.MissingAfter()), past)
	slices.Reverse(views) // oldest first
	ran := map[int64]int{}
	for _, r := range tickdtest.ReadRuns(c.t, c.runsLog) {
		if T, ok := tickOf(r); ok && r.Start.Task == "sync" && (r.Start.Reason == "tick" || r.Start.Reason == "catch_up") {
			ran[T.UnixNano()]++
		}
	}
	c.mu.Lock()
	losses := slices.Clone(c.losses)
	c.mu.Unlock()
	res.reasons = map[string]int{}
	for T := begin.Truncate(every).Add(every); !T.After(end.Add(-2 * every)); T = T.Add(every) {
		why := reasonAt(views, T)
		res.reasons[cmp.Or(strings.SplitN(why, " by ", 2)[0], "none")]++ // "late by 2.1s": late
		wrong := why == "" || (why == history.TickMissed || why == history.TickPaused) && ran[T.UnixNano()] > 0
		if wrong && !c.nearLoss(T, losses) {
			res.unaccounted++
			if len(res.Examples) < 20 {
				res.Examples = append(res.Examples, fmt.Sprintf("tick %s: reason %q, with %d tick runs recorded by the worker", T.UTC().Format(time.RFC3339), why, ran[T.UnixNano()]))
			}
		}
	}
}

// reasonAt is tick T's reason among views (oldest first): its own row's,
// or "paused" when a paused row before it folds it in.
func reasonAt(views []history.TickView, T time.Time) string {
	var before *history.TickView
	for i := range views {
		switch v := &views[i]; {
		case v.Tick.Equal(T):
			return history.Reason(*v)
		case v.Tick.Before(T):
			before = v
		}
	}
	if before != nil && before.State == history.TickPaused {
		return history.TickPaused
	}
	return ""
}

// checkBeats judges what the monitor heard of sync's ticks.
func (c *cluster) checkBeats(res *result, begin, end time.Time) {
	c.mu.Lock()
	losses := slices.Clone(c.losses)
	kills := slices.Collect(maps.Values(c.killedAt))
	judged := c.judgedTicks(begin, end)
	c.mu.Unlock()
	tickOfRID := map[string]time.Time{}
	for T := begin.Truncate(every).Add(-time.Minute); !T.After(end.Add(time.Minute)); T = T.Add(every) {
		tickOfRID[heartbeat.RID("sync", T)] = T
	}
	heard := map[int64]bool{}
	res.beatEnds = map[string]int{}
	for _, r := range c.mon.Runs() {
		if r.Check != "/sync" {
			continue
		}
		T, known := tickOfRID[r.RID]
		heard[T.UnixNano()] = r.Starts > 0
		res.beatStarts += r.Starts
		for _, e := range r.Ends {
			res.beatEnds[e.Kind]++
		}
		if (!known || r.Starts > 1 || len(r.Ends) > 1 || r.EndFirst) && !c.nearLoss(T, losses) {
			res.beatsWrong++
			if len(res.Examples) < 20 {
				res.Examples = append(res.Examples, fmt.Sprintf("heartbeat rid %s (tick %s, known %v): %d starts, %d ends, an end first: %v", r.RID, T.UTC().Format(time.RFC3339), known, r.Starts, len(r.Ends), r.EndFirst))
			}
		}
	}
	// A start is claimed and then sent: a replica killed between the two
	// sends nothing, and no other replica may send it.
	killedIn := func(T time.Time) bool {
		return slices.ContainsFunc(kills, func(k int64) bool { return k >= T.UnixNano() && k <= T.Add(every).UnixNano() })
	}
	for _, T := range judged {
		if !heard[T.UnixNano()] && !killedIn(T) && !c.nearLoss(T, losses) {
			res.beatsWrong++
			if len(res.Examples) < 20 {
				res.Examples = append(res.Examples, fmt.Sprintf("heartbeat: no start heard for the judged tick %s", T.UTC().Format(time.RFC3339)))
			}
		}
	}
}

// beatsRow is the report's figures of the two judgements.
func (r result) beatsRow() string {
	var rs []string
	for _, k := range slices.Sorted(maps.Keys(r.reasons)) {
		rs = append(rs, fmt.Sprintf("%s:%d", strings.ReplaceAll(k, " ", "_"), r.reasons[k]))
	}
	return fmt.Sprintf("reasons=%s unaccounted=%d beats=%d/%d/%d wrong=%d", strings.Join(rs, ","), r.unaccounted,
		r.beatStarts, r.beatEnds["success"], r.beatEnds["fail"], r.beatsWrong)
}
