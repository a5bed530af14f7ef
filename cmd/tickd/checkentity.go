package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/schedule"
)

// checkEntity finds entity id in task t's source and lists its next n ticks
// after start in its own zone (timezone_from), else in the task's. It says
// what is wrong, if anything: a source that failed, a zone that is no zone.
func checkEntity(ctx context.Context, t config.Task, id string, start time.Time, n int) (report.CheckEntityDoc, string) {
	d := report.CheckEntityDoc{ID: id, Attributes: map[string]string{}, Ticks: []report.CheckTickDoc{}}
	f := report.LookupEntity(ctx, &t, id, true)
	if f.Err != nil {
		return d, fmt.Sprintf("cannot read its entities to find %q: %v", id, f.Err)
	}
	if d.Found = f.Listed; !d.Found {
		return d, ""
	}
	maps.Copy(d.Attributes, f.Attributes)
	loc, bad := report.EntityLocation(&t, f.Attributes)
	if loc == nil {
		return d, fmt.Sprintf("entity %q: %s %q is no IANA zone: its runs are skipped (unknown_zone)", id, t.TimezoneFrom, bad)
	}
	d.Timezone = loc.String()
	s := schedule.In(t.Schedule, loc)
	at := start
	for range n {
		if at = s.Next(at); at.IsZero() {
			break
		}
		d.Ticks = append(d.Ticks, report.CheckTickDoc{Tick: report.Instant(at), Local: at.In(loc).Format(time.RFC3339), DST: schedule.DSTNote(s, at)})
	}
	return d, ""
}

// printCheckEntity writes check -entity's part of a task.
func printCheckEntity(w io.Writer, d report.CheckEntityDoc) {
	if !d.Found {
		fmt.Fprintf(w, "  entity %s: not listed by the source\n", idCell(d.ID))
		return
	}
	zone := d.Timezone
	if zone == "" {
		zone = "an unknown zone: its runs are skipped"
	}
	fmt.Fprintf(w, "  entity %s (%s), in %s:\n", idCell(d.ID), attrText(d.Attributes), zone)
	for _, tk := range d.Ticks {
		note := ""
		if tk.DST != "" {
			note = "   <- " + tk.DST
		}
		fmt.Fprintf(w, "    %s%s\n", tk.Local, note)
	}
}
