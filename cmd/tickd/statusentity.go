package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/report"
)

// errNotInConfig is the source's error for a task the config does not
// list: its entities' source is not known.
var errNotInConfig = errors.New("the task is not in this config: its entity source is not known")

// statusEntity prints one entity of t: its attributes as its source gives
// them now (an entities_command run, within entities_timeout), its zone
// and next tick, its lease, last run and pending run.
func statusEntity(ctx context.Context, w io.Writer, store *lease.Store, cfg *config.Config, t *config.Task, id string, asJSON bool) error {
	f := report.Found{Err: errNotInConfig}
	if _, listed := cfg.Task(t.Name); listed {
		f = report.LookupEntity(ctx, t, id, true)
	}
	now := time.Now()
	es, err := report.ReadEntity(ctx, store, t, id, f, now)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, es.Doc(now))
	}
	printEntity(w, es, now)
	return nil
}

// printEntity writes status TASK ENTITY's text.
func printEntity(w io.Writer, es report.EntityStatus, now time.Time) {
	loc := es.Task.Location
	fmt.Fprintf(w, "%s / %s\n", es.Task.Name, idCell(es.ID))
	switch {
	case es.Err != nil:
		fmt.Fprintf(w, "  attributes: unknown: %s\n", report.Visible(es.Err.Error()))
	case !es.Listed:
		fmt.Fprintf(w, "  not listed by its source (%s)\n", report.DescribeSource(*es.Task))
	default:
		fmt.Fprintf(w, "  attributes: %s (%s, read now)\n", orDash(attrText(es.Attributes)), report.DescribeSource(*es.Task))
	}
	if es.Location == nil {
		fmt.Fprintf(w, "  zone: %s %q is no IANA zone: its runs are skipped (unknown_zone)\n", es.Task.TimezoneFrom, report.Visible(es.BadZone))
	} else {
		fmt.Fprintf(w, "  zone: %s, next tick %s\n", es.Location, es.NextTick.In(es.Location).Format(time.RFC3339))
		loc = es.Location
	}
	if h := es.State.Held; h != nil {
		revoked := ""
		if h.Revoked {
			revoked = " (revoked: stopping)"
		}
		fmt.Fprintf(w, "  lease: held by %s %s, fence %d, %v left, for a %s run%s\n", h.Holder, ago(now, h.Since), h.Fence, h.TTL.Round(time.Millisecond), h.Reason, revoked)
	} else {
		fmt.Fprintln(w, "  lease: free")
	}
	if r := es.State.Last; r != nil {
		fmt.Fprintf(w, "  last run: %s (%s), ended %s, took %v, on %s, fence %d; last tick run %s\n", r.Outcome, r.Reason, ago(now, r.Ended),
			r.Ended.Sub(r.Started), orDash(r.Replica), r.Fence, r.LastTick.In(loc).Format(time.RFC3339))
		if r.Error != "" {
			fmt.Fprintf(w, "    error: %s\n", report.Visible(r.Error))
		}
	} else {
		fmt.Fprintln(w, "  last run: none retained")
	}
	if d := es.State.Pending; d != nil {
		fmt.Fprintf(w, "  pending: %s (attempt %d), due %s\n", d.Reason, d.Attempt, d.At.In(loc).Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "  pending: none")
	}
}

// attrText is attributes as name=value pairs, by name.
func attrText(a map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		pairs = append(pairs, k+"="+idCell(a[k]))
	}
	return strings.Join(pairs, " ")
}
