package report

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
)

// LimitStatus is one limit as status shows it: the config's words, the
// tasks that share it, its runs across the replicas and the budgets an API
// closed.
type LimitStatus struct {
	Limit config.Limit
	Tasks []string
	lease.LimitStatus
}

// ReadLimits reads the state of each of cfg's limits.
func ReadLimits(ctx context.Context, store *lease.Store, cfg *config.Config) ([]LimitStatus, error) {
	users := cfg.LimitUsers()
	out := []LimitStatus{}
	for _, l := range cfg.Limits {
		st, err := store.Fleet().LimitStatus(ctx, leaseconf.Limit(&l))
		if err != nil {
			return nil, err
		}
		out = append(out, LimitStatus{Limit: l, Tasks: users[l.Name], LimitStatus: st})
	}
	return out, nil
}

// Doc is the limit as the JSON output says it.
func (l LimitStatus) Doc() LimitDoc {
	d := LimitDoc{Name: l.Limit.Name, Says: l.Limit.String(), Concurrency: l.Limit.Concurrency, Rate: l.Limit.Rate, Per: l.Limit.Per,
		Tasks: append([]string{}, l.Tasks...), Runs: l.Runs, Busiest: l.Busiest, Closed: []ClosingDoc{}}
	for e, c := range l.Closed {
		d.Closed = append(d.Closed, ClosingDoc{Entity: e, Until: Instant(c.Until), Reason: c.Reason})
	}
	sort.Slice(d.Closed, func(i, j int) bool { return d.Closed[i].Until.Time().Before(d.Closed[j].Until.Time()) })
	d.Waiting = l.Waiting
	if len(l.Oldest) > 0 {
		o := l.Oldest[0]
		d.OldestWait, d.OldestTask, d.OldestEntity = Seconds(max(0, time.Since(o.Since))), o.Task, o.Entity
	}
	d.LearnedRate, d.RateSource = math.Round(l.LimitStatus.Rate*100)/100, l.RateSource
	d.GroupsWaiting, d.StartsLastMinute, d.GroupsStarved, d.Groups = l.GroupsWaiting, l.Starts, l.Starved, []GroupDoc{}
	for _, g := range l.Groups {
		d.Groups = append(d.Groups, GroupDoc{Group: g.Name, Waiting: g.Waiting, OldestWait: Seconds(max(0, time.Since(g.Oldest))), Weight: g.Weight,
			Started: g.Started, FairShare: math.Round(g.FairShare*10) / 10, Starved: g.Starved})
	}
	return d
}

// RateNow says a rate = "auto" limit's rate and where it came from: "rate
// 18.7/s learned from RateLimit-Policy "burst";q=100;w=60", or "" for
// another limit.
func (l LimitStatus) RateNow() string {
	switch {
	case l.Limit.Rate != config.RateAuto:
		return ""
	case l.LimitStatus.Rate == 0:
		return "rate not learned yet: no answer said it"
	}
	return fmt.Sprintf("rate %.1f/s learned from %s", l.LimitStatus.Rate, Visible(l.RateSource))
}

// GroupsNow says a fair limit's groups: how many wait, how many are
// starved, and the one that waited longest, with its share of the last
// minute's starts: "101 waiting, 0 starved; longest big: 9,870 runs,
// oldest 41s, 12 of 1,200 starts (fair 11.9)". "" for another limit.
func (l LimitStatus) GroupsNow(now time.Time) string {
	if l.Limit.FairBy == "" {
		return ""
	}
	s := fmt.Sprintf("%d waiting, %d starved", l.GroupsWaiting, l.Starved)
	if len(l.Groups) > 0 {
		g := l.Groups[0]
		s += fmt.Sprintf("; longest %s: %d runs, oldest %v, %d of %d starts (fair %.1f)", Visible(g.Name), g.Waiting,
			now.Sub(g.Oldest).Round(time.Second), g.Started, l.Starts, g.FairShare)
	}
	return s
}

// WaitingNow says the runs waiting in the limit's line and the oldest's
// wait: "12, oldest 41s", or "-".
func (l LimitStatus) WaitingNow(now time.Time) string {
	if l.Waiting == 0 || len(l.Oldest) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d, oldest %v", l.Waiting, now.Sub(l.Oldest[0].Since).Round(time.Second))
}

// InUse says the limit's runs against its concurrency: "3/8", "3" with no
// bound.
func (l LimitStatus) InUse() string {
	if l.Limit.Concurrency == 0 {
		return strconv.Itoa(l.Runs)
	}
	return strconv.Itoa(l.Runs) + "/" + strconv.Itoa(l.Limit.Concurrency)
}

// ClosedFor is how long the longest-closed budget stays closed.
func (l LimitStatus) ClosedFor(now time.Time) time.Duration {
	d := time.Duration(0)
	for _, c := range l.Closed {
		d = max(d, c.Until.Sub(now))
	}
	return d
}
