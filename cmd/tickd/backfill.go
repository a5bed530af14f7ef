package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/lease/driver"
)

// backfillFlags are tickd backfill's flags.
type backfillFlags struct {
	from, to, only, entities, group *string
	cancel                          *string
	dryRun, wait, asJSON            *bool
	timeout                         *time.Duration
	by                              *string
}

func runBackfill(ctx context.Context, args []string, stdout io.Writer) error {
	c := newCmdline("backfill", "[TASK -from T1 -to T2]")
	fs := c.fs
	f := backfillFlags{
		from:     fs.String("from", "", "the range's first tick, RFC 3339 (2026-11-20T00:00:00Z)"),
		to:       fs.String("to", "", "the range's last tick, RFC 3339"),
		only:     fs.String("only", "", "which (entity, tick)s to run, each once: missing, those no one ran (the default), failed, those whose run failed, or all, every one again"),
		entities: fs.String("entities", "", "only these entities, comma-separated (default: every entity of the task)"),
		group:    fs.String("group", "", "only the entities of this group: whose attribute the task's fair limit groups by (fair_by) is this"),
		cancel:   fs.String("cancel", "", "cancel the backfill of this id"),
		dryRun:   fs.Bool("dry-run", false, "print how many runs it would start, and start none"),
		wait:     fs.Bool("wait", false, "wait until it has ended, printing its progress"),
		timeout:  fs.Duration("timeout", 24*time.Hour, "with -wait, how long to wait"),
		asJSON:   c.jsonFlag(),
	}
	f.by = c.byFlag()
	pos, err := c.args(args, 0, 1, "TASK")
	if err != nil {
		return err
	}
	cfg, err := config.Load(*c.config)
	if err != nil {
		return err
	}
	var t *config.Task
	switch {
	case *f.cancel != "" && len(pos) > 0:
		return c.usage("-cancel takes no TASK")
	case *f.cancel == "" && len(pos) == 0 && (*f.from != "" || *f.to != ""):
		return c.usage("-from and -to need a TASK")
	case len(pos) == 1:
		var ok bool
		if t, ok = cfg.Task(pos[0]); !ok {
			return fmt.Errorf("no task %q in %s", pos[0], cfg.Path)
		}
	}
	var from, to time.Time
	if t != nil {
		if from, to, err = backfillRange(c, f); err != nil {
			return err
		}
	}
	store, done, err := cliStore(cfg, "backfill", 0)
	if err != nil {
		return err
	}
	defer done()
	switch {
	case *f.cancel != "":
		d, err := ops.CancelBackfill(ctx, store, cfg, *f.cancel, *f.by)
		if err != nil {
			return err
		}
		notRecorded(d)
		return printSaid(stdout, *f.asJSON, d)
	case t == nil:
		return listBackfills(ctx, store, stdout, *f.asJSON)
	}
	return startBackfill(ctx, store, cfg, t, from, to, f, stdout)
}

// startBackfill plans a backfill of t from from to to (of some entities:
// -entities, -group, by cfg), and starts it but for a dry run: it prints the plan, or with -wait how it ended.
func startBackfill(ctx context.Context, store *lease.Store, cfg *config.Config, t *config.Task, from, to time.Time, f backfillFlags, stdout io.Writer) error {
	var ids []string
	if *f.entities != "" {
		ids = strings.Split(*f.entities, ",")
	}
	if *f.group != "" {
		var err error
		if ids, err = ops.GroupIDs(ctx, cfg, *t, *f.group, ids); err != nil {
			return err
		}
	}
	plan, err := ops.PlanBackfill(ctx, store, *t, driver.Backfill{From: from, To: to, Entities: ids, Only: only(*f.only), By: *f.by}, time.Now())
	if err != nil {
		return err
	}
	if !*f.dryRun {
		d, err := ops.StartBackfill(ctx, store, t, plan)
		if err != nil {
			return err
		}
		notRecorded(d)
	}
	doc := report.BackfillDocOf(plan.Backfill, time.Now())
	doc.Runs = plan.Runs
	if *f.wait && !*f.dryRun {
		if doc, err = waitBackfill(ctx, store, plan, *f.timeout, stdout, *f.asJSON); err != nil {
			return err
		}
	}
	if *f.asJSON {
		return printJSON(stdout, doc)
	}
	printBackfill(stdout, doc, *f.dryRun)
	return nil
}

// backfillRange is -from and -to, which a backfill of a task needs; -only
// is missing.
func backfillRange(c *cmdline, f backfillFlags) (from, to time.Time, err error) {
	if !slices.Contains([]string{"", "missing", "all", "failed"}, *f.only) {
		return from, to, c.usage("-only %q: missing (the (entity, tick)s no one ran), failed (those whose run failed) or all (every one again), each once", *f.only)
	}
	if *f.from == "" || *f.to == "" {
		return from, to, c.usage("a backfill needs -from and -to")
	}
	if from, err = time.Parse(time.RFC3339, *f.from); err != nil {
		return from, to, c.usage("-from %q: want RFC 3339, such as 2026-11-20T00:00:00Z", *f.from)
	}
	if to, err = time.Parse(time.RFC3339, *f.to); err != nil {
		return from, to, c.usage("-to %q: want RFC 3339, such as 2026-11-27T00:00:00Z", *f.to)
	}
	return from, to, nil
}

// printSaid prints what an action did.
func printSaid(w io.Writer, asJSON bool, d ops.Done) error {
	if asJSON {
		return printJSON(w, map[string]string{"said": d.Said})
	}
	_, err := fmt.Fprintln(w, d.Said)
	return err
}

// waitBackfill waits until plan's backfill has ended (or was cancelled),
// printing its progress (without asJSON) as it changes.
func waitBackfill(ctx context.Context, store *lease.Store, plan ops.BackfillPlan, timeout time.Duration, w io.Writer, asJSON bool) (report.BackfillDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		bs, err := store.Fleet().Backfills(ctx)
		if err != nil {
			return report.BackfillDoc{}, err
		}
		if i := slices.IndexFunc(bs, func(b driver.Backfill) bool { return b.ID == plan.Backfill.ID }); i >= 0 {
			doc := report.BackfillDocOf(bs[i], time.Now())
			if line := progressLine(doc); !asJSON && line != last {
				fmt.Fprintln(w, line)
				last = line
			}
			if doc.State == report.BackfillEnded || doc.State == report.BackfillCancelled {
				return doc, nil
			}
		}
		select {
		case <-ctx.Done():
			return report.BackfillDoc{}, fmt.Errorf("backfill %s has not ended after %s: it goes on (tickd backfill lists it)", plan.Backfill.ID, timeout)
		case <-tick.C:
		}
	}
}

// progressLine says how far a backfill got.
func progressLine(d report.BackfillDoc) string {
	return fmt.Sprintf("backfill %s: %s, %d of %d ticks done (%d left out as unknown), %d runs started, %d failed, %d had run before, %d left busy",
		d.ID, d.State, d.Done, d.Ticks-d.Unknown, d.Unknown, d.Ran, d.Failed, d.Skipped, d.Busy)
}

// printBackfill prints a backfill as created (or planned, for a dry run).
func printBackfill(w io.Writer, d report.BackfillDoc, dryRun bool) {
	if dryRun {
		fmt.Fprintf(w, "dry run: backfill of %s from %s to %s would start %d runs over %d ticks (%d left out as unknown: a replica ran them while the task kept no run_record)\n",
			d.Task, d.From.Time().UTC().Format(time.RFC3339), d.To.Time().UTC().Format(time.RFC3339), d.Runs, d.Ticks-d.Unknown, d.Unknown)
		return
	}
	if d.State == report.BackfillWaiting && d.Runs >= 0 {
		fmt.Fprintf(w, "backfill %s of %s: %d runs to start over %d ticks (%d left out as unknown); a replica that runs the task takes it within a second; tickd backfill -cancel %s stops it\n",
			d.ID, d.Task, d.Runs, d.Ticks-d.Unknown, d.Unknown, d.ID)
		return
	}
	fmt.Fprintln(w, progressLine(d))
}

// listBackfills prints every backfill kept, the newest first.
func listBackfills(ctx context.Context, store *lease.Store, w io.Writer, asJSON bool) error {
	bs, err := report.ReadBackfills(ctx, store, "")
	if err != nil {
		return err
	}
	doc := report.BackfillListDoc{Backfills: []report.BackfillDoc{}}
	for _, b := range bs {
		doc.Backfills = append(doc.Backfills, report.BackfillDocOf(b, time.Now()))
	}
	if asJSON {
		return printJSON(w, doc)
	}
	if len(bs) == 0 {
		fmt.Fprintln(w, "no backfills")
		return nil
	}
	backfillTable(w, "", doc.Backfills)
	return nil
}

// backfillTable prints backfills, a row each, indented by indent.
func backfillTable(w io.Writer, indent string, bs []report.BackfillDoc) {
	tb := table{indent: indent}
	tb.row("ID", "TASK", "FIRST TICK", "LAST TICK", "STATE", "DONE", "LEFT", "RAN", "FAILED", "RAN BEFORE", "BUSY", "BY")
	for _, d := range bs {
		tb.row(d.ID, d.Task, d.From.Time().UTC().Format(time.RFC3339), d.To.Time().UTC().Format(time.RFC3339), d.State, d.Done, d.Left,
			d.Ran, d.Failed, d.Skipped, d.Busy, d.By)
	}
	tb.write(w)
}

// only is -only's backfill (driver.Backfill.Only).
func only(flag string) string {
	switch flag {
	case "all":
		return driver.BackfillAll
	case "failed":
		return driver.BackfillFailed
	}
	return driver.BackfillMissing
}
