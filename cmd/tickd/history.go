package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/lease/driver"
)

// runHistory prints a task's recent ticks, newest first, then its recent
// failures and operator actions.
func runHistory(ctx context.Context, args []string, stdout io.Writer) error {
	c := newCmdline("history", "TASK")
	asJSON := c.jsonFlag()
	limit := c.fs.Int("limit", 20, "at most this many ticks, failures and actions")
	onlyFailures := c.fs.Bool("failures", false, "print only the recent failures (text output)")
	onlyActions := c.fs.Bool("actions", false, "print only the operator actions (text output)")
	pos, err := c.args(args, 1, 1, "TASK")
	if err != nil {
		return err
	}
	if *limit < 1 {
		return c.usage("-limit %d: show at least 1 row", *limit)
	}
	cfg, err := config.Load(*c.config)
	if err != nil {
		return err
	}
	store, done, err := cliStore(cfg, "history", 0)
	if err != nil {
		return err
	}
	defer done()
	t, err := report.FindTask(ctx, store, cfg, pos[0])
	if err != nil {
		return err
	}
	h, err := report.ReadHistory(ctx, store, t, *limit, time.Now())
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, h.Doc())
	}
	if !*onlyFailures && !*onlyActions {
		printTicks(stdout, h)
	}
	if !*onlyActions {
		printFailures(stdout, h.Failures, t.Location, *limit)
	}
	if !*onlyFailures {
		printActions(stdout, h.Actions, t.Location, *limit)
	}
	return nil
}

func printHealth(w io.Writer, indent string, h history.Health, flagAfter int) {
	if h.NotFiring != "" {
		fmt.Fprintf(w, "%sNOT FIRING: %s\n", indent, h.NotFiring)
	}
	if h.Failing {
		fmt.Fprintf(w, "%sFAILING: every run of the last %d ticks failed\n", indent, flagAfter)
	}
	if h.Starved {
		fmt.Fprintf(w, "%sSTARVED: the last %d ticks ran nothing\n", indent, flagAfter)
	}
}

func printTicks(w io.Writer, h report.TaskHistory) {
	loc := h.Task.Location
	fmt.Fprintf(w, "%s: ticks, newest first (%s)\n", h.Task.Name, loc)
	printHealth(w, "  ", h.Health, h.Task.FlagAfter)
	if len(h.Ticks) == 0 {
		fmt.Fprintln(w, "  none recorded")
		return
	}
	tb := table{indent: "  "}
	tb.row("TICK", "STATE", "ENTITIES", "RUNS", "OUTCOMES", "SKIPPED", "LAG", "DURATION", "REPLICAS")
	for _, v := range h.Ticks {
		state := v.State
		if why := history.Why(v); why != "" {
			state += " (" + why + ")"
		}
		if v.SourceFailed() && !strings.Contains(state, "source failed") { // said once, whether or not it is why
			state += " (source failed)"
		}
		if v.State == history.TickMissed {
			tb.row(v.Tick.In(loc).Format(time.RFC3339), state, "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		if a := v.Pause; a != nil {
			state = fmt.Sprintf("paused by %s: %s", a.By, report.Visible(a.Reason))
			tb.row(v.Tick.In(loc).Format(time.RFC3339), state, "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		tb.row(v.Tick.In(loc).Format(time.RFC3339), state, v.Entities(), v.Runs(), history.Counts(v.Outcomes(), "-"), history.Counts(v.Skipped(), "-"),
			history.Millis(v.FirstStart()), history.Millis(v.LastEnd()), strings.Join(v.Replicas(), " "))
	}
	tb.write(w)
	for _, v := range h.Ticks { // a task whose entities tick in zones of their own
		if zs := v.Zones(); len(zs) > 0 {
			fmt.Fprintf(w, "  %s served the zones %s\n", v.Tick.In(loc).Format(time.RFC3339), strings.Join(zs, ", "))
		}
	}
	for _, v := range h.Ticks {
		if e := v.SourceError(); e != "" {
			fmt.Fprintf(w, "  the source of the tick at %s failed: %s\n", v.Tick.In(loc).Format(time.RFC3339), report.Visible(e))
		}
	}
}

// printFailures lists failures, their instants in loc (the task's zone),
// as every text output names a task's instants.
func printFailures(w io.Writer, fs []driver.Failure, loc *time.Location, limit int) {
	fmt.Fprintf(w, "recent failures: %d%s\n", len(fs), more(len(fs), limit))
	for _, f := range fs {
		fmt.Fprintf(w, "  %s  %s  %s (%s, tick %s, fence %d, on %s): %s\n", f.Ended.In(loc).Format(time.RFC3339), idCell(f.Entity),
			f.Outcome, f.Reason, f.Tick.In(loc).Format(time.RFC3339), f.Fence, f.Replica, report.Visible(f.Error))
		for line := range strings.SplitSeq(strings.TrimRight(f.Output, "\n"), "\n") {
			if f.Output != "" {
				fmt.Fprintf(w, "    | %s\n", report.Visible(line))
			}
		}
	}
}

// more says, after a count of rows that -limit bounds, that more may be
// kept when the count reached it.
func more(n, limit int) string {
	if n < limit {
		return ""
	}
	return fmt.Sprintf(" (the newest %d: more may be kept; raise -limit to see them)", n)
}

func printActions(w io.Writer, as []driver.Action, loc *time.Location, limit int) {
	fmt.Fprintf(w, "operator actions: %d%s\n", len(as), more(len(as), limit))
	for _, a := range as {
		line := fmt.Sprintf("  %s  %s by %s", a.At.In(loc).Format(time.RFC3339), a.What, report.Visible(a.By))
		if len(a.Entities) > 0 {
			line += fmt.Sprintf(" %q", a.Entities)
		}
		if !a.Until.IsZero() {
			line += " until " + a.Until.In(loc).Format(time.RFC3339)
		}
		if a.Reason != "" {
			line += ": " + report.Visible(a.Reason)
		}
		if a.Detail != "" {
			line += " (" + report.Visible(a.Detail) + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// idCell is an entity id in a table column: as it is when it is plain
// (printable, no space), quoted otherwise, so that a column stays a column.
func idCell(id string) string {
	if id != "" && !strings.ContainsFunc(id, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"' }) {
		return id
	}
	return strconv.Quote(id)
}
