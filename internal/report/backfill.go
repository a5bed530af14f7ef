package report

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
)

// The states of a backfill (BackfillDoc.State).
const (
	BackfillWaiting   = "waiting" // no replica holds it: none runs its task, or all were stopped
	BackfillRunning   = "running"
	BackfillEnded     = "ended"
	BackfillCancelled = "cancelled"
)

// BackfillState is bf's state at now.
func BackfillState(bf driver.Backfill, now time.Time) string {
	switch {
	case bf.Cancelled != "":
		return BackfillCancelled
	case !bf.Ended.IsZero():
		return BackfillEnded
	case bf.Until.After(now):
		return BackfillRunning
	}
	return BackfillWaiting
}

// BackfillDocOf is bf's document at now; its Runs is -1 (not planned).
func BackfillDocOf(bf driver.Backfill, now time.Time) BackfillDoc {
	d := BackfillDoc{ID: bf.ID, Task: bf.Task, From: Instant(bf.From), To: Instant(bf.To), Entities: bf.Entities, By: bf.By,
		Created: Instant(bf.Created), Ticks: bf.Total, Unknown: len(bf.Unknown), Done: bf.Ticks, Ran: bf.Ran, Skipped: bf.Skipped,
		Busy: bf.Busy, Failed: bf.Failed, Left: max(bf.Total-len(bf.Unknown)-bf.Ticks, 0), State: BackfillState(bf, now),
		Holder: bf.Holder, Cursor: Instant(bf.Cursor), Ended: Instant(bf.Ended), Cancelled: bf.Cancelled, Runs: -1}
	if d.Entities == nil {
		d.Entities = []string{}
	}
	d.Only = cmp.Or(bf.Only, "missing")
	if d.State == BackfillEnded || d.State == BackfillCancelled {
		d.Left = 0
	}
	return d
}

// ReadBackfills reads the backfills kept, of task only (every task for
// ""), the newest first.
func ReadBackfills(ctx context.Context, store *lease.Store, only string) ([]driver.Backfill, error) {
	bs, err := store.Fleet().Backfills(ctx)
	if err != nil {
		return nil, err
	}
	bs = slices.DeleteFunc(bs, func(b driver.Backfill) bool { return only != "" && b.Task != only })
	slices.SortFunc(bs, func(a, b driver.Backfill) int { return b.Created.Compare(a.Created) })
	return bs, nil
}
