package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/redisconn"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/lease/driver"
)

func runStatus(ctx context.Context, args []string, stdout io.Writer) error {
	c := newCmdline("status", "[TASK [ENTITY]]")
	fs := c.fs
	asJSON := c.jsonFlag()
	limit := fs.Int("limit", 20, "at most this many leases, last runs and due entries per task")
	outcome := fs.String("outcome", "", "only last runs with this outcome (done, failed, timeout…)")
	all := fs.Bool("all", false, fmt.Sprintf("read every entity's lease and last run (a walk of the whole task, which grows with it: 0.8s for 200,000 entities on 2 cores); without it, the first %d a task", report.StatusScan))
	pos, err := c.args(args, 0, 2)
	if err != nil {
		return err
	}
	if *limit < 1 {
		return c.usage("-limit %d: show at least 1 row", *limit)
	}
	if o := driver.Outcome(*outcome); o != "" && o.Index() < 0 {
		return c.usage("-outcome %q: use one of %v", *outcome, driver.AllOutcomes())
	}
	cfg, err := config.LoadConnection(*c.config) // a config of only [redis] shows tickd lock's locks
	if err != nil {
		return err
	}
	var only string
	if len(pos) > 0 {
		only = pos[0]
	}
	store, done, err := cliStore(cfg, "status", 0)
	if err != nil {
		return err
	}
	defer done()
	if only != "" {
		t, err := report.FindTask(ctx, store, cfg, only)
		if err != nil {
			return err
		}
		if len(pos) == 2 {
			return statusEntity(ctx, stdout, store, cfg, t, pos[1], *asJSON)
		}
	}
	scan := report.StatusScan
	if *all {
		scan = 0
	}
	st, err := report.ReadStatus(ctx, store, cfg, only, *limit, scan, *outcome, time.Now())
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, st.Doc())
	}
	repl, replicas, out, now := st.Replication, st.Replicas, st.Tasks, st.Now
	fmt.Fprintln(stdout, replicationLine(redisconn.Where(cfg.Redis), repl))
	printReplicas(stdout, replicas, now)
	printStatus(stdout, out, now)
	printLimits(stdout, st.Limits, now)
	if doc := st.Doc(); len(doc.Backfills) > 0 {
		fmt.Fprintf(stdout, "backfills (tickd backfill): %d\n", len(doc.Backfills))
		backfillTable(stdout, "    ", doc.Backfills)
	}
	if st.LockCount > 0 {
		fmt.Fprintf(stdout, "locks held (tickd lock): %d%s\n", st.LockCount, shown(len(st.Locks), st.LockCount))
		tb := table{indent: "    "}
		tb.row("KEY", "HOLDER", "AGE", "FENCE", "TTL LEFT")
		for _, h := range st.Locks {
			tb.row(h.Entity, h.Holder, ago(now, h.Since), h.Fence, h.TTL.Round(time.Millisecond))
		}
		tb.write(stdout)
	}
	return nil
}

// replicationLine says what the primary reports of its replicas, and
// whether a lease write made now would be trusted.
func replicationLine(where string, r driver.Replication) string {
	line := fmt.Sprintf("redis: %s, role %s, %d replicas online; replica_acks %s", where, r.Role, r.Online, r.Mode)
	switch {
	case r.Err != nil:
		return line + fmt.Sprintf(": NOT ACKNOWLEDGED, nothing new starts (%v)", r.Err)
	case r.Want == 0:
		return line + ": no wait"
	}
	return line + fmt.Sprintf(": a write now is acknowledged by %d of %d", r.Got, r.Want)
}

// shown says how many rows of a section are shown, when -limit cut it.
func shown(rows, total int) string {
	if rows < total {
		return fmt.Sprintf(" (the first %d shown: raise -limit for more)", rows)
	}
	return ""
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

func printStatus(w io.Writer, ts []report.TaskStatus, now time.Time) {
	for _, t := range ts {
		loc, err := time.LoadLocation(t.Timezone)
		if err != nil {
			loc = time.UTC
		}
		state := ""
		if t.Paused {
			state = "  PAUSED" + pauseText(t.Pause, loc)
		}
		if u := t.Unlisted; u != nil {
			fmt.Fprintf(w, "%s: %s in %s; not in this config: the task registry remembers it (last run by %s, registered %s)%s\n",
				t.Name, t.Schedule, t.Timezone, u.By, u.Seen.In(loc).Format(time.RFC3339), state)
		} else if t.Paused {
			fmt.Fprintf(w, "%s: %s in %s%s\n", t.Name, t.Schedule, t.Timezone, state)
		} else {
			fmt.Fprintf(w, "%s: %s in %s, next tick %s\n", t.Name, t.Schedule, t.Timezone, t.NextTick.In(loc).Format(time.RFC3339))
		}
		printShards(w, t)
		printHealth(w, "  ", t.Health, t.FlagAfter)
		if v := t.LastTick; v != nil {
			fmt.Fprintf(w, "  last tick: %s %s, %d entities, %d runs (%s), skipped %s\n", v.Tick.In(loc).Format(time.RFC3339),
				v.State, v.Entities(), v.Runs(), history.Counts(v.Outcomes(), "-"), history.Counts(v.Skipped(), "-"))
			if e := v.SourceError(); e != "" {
				fmt.Fprintf(w, "  its entity source failed: %s\n", report.Visible(e))
			}
		}
		if t.Partial {
			fmt.Fprintf(w, "  entities: the first %d looked at (-all walks every one); the counts below are of those\n", t.Scanned)
		}
		fmt.Fprintf(w, "  leases held: %d%s\n", t.LeaseCount, shown(len(t.Leases), t.LeaseCount))
		if len(t.Leases) > 0 {
			tb := table{indent: "    "}
			tb.row("ENTITY", "HOLDER", "AGE", "FENCE", "TTL LEFT", "REASON")
			for _, h := range t.Leases {
				reason := string(h.Reason)
				if h.Revoked {
					reason += " (revoked: stopping)"
				}
				tb.row(idCell(h.Entity), h.Holder, ago(now, h.Since), h.Fence, h.TTL.Round(time.Millisecond), reason)
			}
			tb.write(w)
		}
		fmt.Fprintf(w, "  last runs: %d%s\n", t.RunCount, shown(len(t.LastRuns), t.RunCount))
		if len(t.LastRuns) > 0 {
			tb := table{indent: "    "}
			tb.row("ENTITY", "ENDED", "REASON", "OUTCOME", "DURATION", "REPLICA", "FENCE", "ERROR")
			for _, r := range t.LastRuns {
				outcome := string(r.Outcome)
				if r.By != "" {
					outcome += " by " + report.Visible(r.By)
				}
				tb.row(idCell(r.Entity), ago(now, r.Ended), r.Reason, outcome, r.Ended.Sub(r.Started), r.Replica, r.Fence,
					orDash(report.Visible(r.Error)))
			}
			tb.write(w)
		}
		atLeast := ""
		if t.DuePartial {
			atLeast = "at least " // -all counts them all
		}
		fmt.Fprintf(w, "  pending: %s%d%s\n", atLeast, t.DueCount, shown(len(t.Due), t.DueCount))
		if len(t.Due) > 0 {
			tb := table{indent: "    "}
			tb.row("ENTITY", "REASON", "ATTEMPT", "DUE")
			for _, d := range t.Due {
				tb.row(idCell(d.Entity), d.Reason, d.Attempt, d.At.In(loc).Format(time.RFC3339))
			}
			tb.write(w)
		}
	}
}

// printReplicas lists the replicas running now: what each announced last.
func printReplicas(w io.Writer, rs []driver.Replica, now time.Time) {
	fmt.Fprintf(w, "replicas: %d running\n", len(rs))
	if len(rs) == 0 {
		return
	}
	tb := table{indent: "  "}
	tb.row("ID", "HOST", "VERSION", "STARTED", "LAST SEEN", "TASKS")
	for _, r := range rs {
		id := r.ID
		if r.DuplicateOn != "" {
			id += " (DUPLICATE: also on " + report.Visible(r.DuplicateOn) + ")"
		}
		tb.row(id, orDash(r.Host), orDash(r.Version), ago(now, r.Since), ago(now, r.Seen), orDash(strings.Join(r.Tasks, " ")))
	}
	tb.write(w)
}

// pauseText says who paused a task, why and until when.
func pauseText(p driver.PauseInfo, loc *time.Location) string {
	s := ""
	if p.By != "" {
		s += " by " + report.Visible(p.By)
	}
	if !p.Until.IsZero() {
		s += " until " + p.Until.In(loc).Format(time.RFC3339)
	}
	if p.Reason != "" {
		s += ": " + report.Visible(p.Reason)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printLimits writes each limit: its runs across the replicas against its
// concurrency, what it says, and the budgets an API closed.
func printLimits(w io.Writer, ls []report.LimitStatus, now time.Time) {
	if len(ls) == 0 {
		return
	}
	fmt.Fprintln(w, "limits (across every replica):")
	tb := table{indent: "    "}
	tb.row("LIMIT", "RUNS", "WAITING", "SAYS", "TASKS", "CLOSED")
	for _, l := range ls {
		closed := "-"
		if d := l.Doc(); len(d.Closed) > 0 {
			c := d.Closed[len(d.Closed)-1]
			closed = fmt.Sprintf("%d budget(s), for up to %v: %s", len(d.Closed), l.ClosedFor(now).Round(time.Second), report.Visible(c.Reason))
		}
		tb.row(l.Limit.Name, l.InUse(), l.WaitingNow(now), l.Limit.String(), strings.Join(l.Tasks, ","), closed)
	}
	tb.write(w)
	for _, l := range ls {
		if r := l.RateNow(); r != "" {
			fmt.Fprintf(w, "    %s: %s\n", l.Limit.Name, r)
		}
		if g := l.GroupsNow(now); g != "" {
			fmt.Fprintf(w, "    %s's groups: %s\n", l.Limit.Name, g)
		}
	}
}

// printShards says a task's shard count in force (recorded in Redis) when
// it has several, or when the config says another.
func printShards(w io.Writer, t report.TaskStatus) {
	switch {
	case t.Unlisted != nil:
	case t.Resharding != "":
		fmt.Fprintf(w, "  shards: being moved by tickd migrate (%s); nothing of it is granted until the move is over\n", t.Resharding)
	case t.Shards != t.ConfigShards:
		fmt.Fprintf(w, "  shards: %d, recorded in Redis and in force; the config says %d (tickd migrate with it reshards the task)\n", t.Shards, t.ConfigShards)
	case t.Shards > 1:
		fmt.Fprintf(w, "  shards: %d\n", t.Shards)
	}
}
