package driver

import "time"

// BackfillKept is how long a driver keeps a backfill after it ended.
const BackfillKept = 7 * 24 * time.Hour

// FannedKept is how long a driver keeps, for each tick that an Acquire of
// ReasonTick runs asked for, that it was fanned out (TickRan.Fanned): a
// backfill runs a tick older than that, whose run record is not kept,
// for no entity.
const FannedKept = 8 * 24 * time.Hour

// Backfill is an operator's run of a past range of a task's ticks (tickd
// backfill): what it runs, how far it got, who runs it. Its runs have
// ReasonBackfill: as ReasonCatchUp's, each is granted only when the run
// record says its entity has not run its tick.
type Backfill struct {
	ID       string // unique: lower-case letters and digits
	Task     string
	From, To time.Time // its ticks: From and To, and those between
	Entities []string  // only these entities; nil: every one of the task
	// Unknown are ticks of the range it leaves out: which entities ran
	// them is not known (a replica fanned them out, or may have, while the
	// task kept no run record).
	Unknown []time.Time
	Total   int // the range's ticks, Unknown ones included
	// Only says which (entity, tick)s it runs: BackfillMissing, those the
	// run record says did not run, BackfillAll, every one again, or
	// BackfillFailed, those whose run failed (each once in the backfill:
	// Request.RecordOf its ID).
	Only    string
	By      string // who asked for it
	Created time.Time

	// Its progress, saved by the replica that runs it.
	Cursor  time.Time // the newest tick fanned out whole; zero: none yet
	Ticks   int       // the ticks fanned out whole
	Ran     int64     // the runs started
	Skipped int64     // an (entity, tick) found run before
	// Busy: an (entity, tick) whose entity stayed busy with other runs
	// until the backfill gave it up: a backfill of the range runs it.
	Busy int64
	// Failed: the runs that failed or timed out, as the replicas that ran
	// them counted them once they ended.
	Failed int64
	Ended  time.Time // zero while it goes on

	// Cancelled is who cancelled it (CancelBackfill); "" if no one did.
	// Holder is the store (Config.Holder) that runs it, until Until;
	// SaveBackfill sets the two.
	Cancelled string
	Holder    string
	Until     time.Time
}

// What a backfill runs (Backfill.Only).
const (
	BackfillMissing = ""       // the (entity, tick)s no one ran
	BackfillAll     = "all"    // every (entity, tick) again, once
	BackfillFailed  = "failed" // the (entity, tick)s whose run failed (TickRan.Failed), once
)

// TickRan is the run record of one tick (Driver.RunRecord): whether it is
// kept (a grant with Request.Record wrote it, and it has not expired),
// and, when it is, whether each entity asked for ran the tick.
type TickRan struct {
	Kept bool
	Ran  []bool // by entity, as asked; nil when not Kept
	// Forgotten: which entities ran the tick is not known (a reshard since
	// numbered the entities anew, or the store lost its data after it); a
	// run ByRecord of it is refused.
	Forgotten bool
	// Fanned: an Acquire of ReasonTick runs asked for the tick within
	// FannedKept (a replica fanned it out, in part at least).
	Fanned bool
	// Failed says, by entity as asked, which ran the tick and failed, as
	// MarkFailed kept it; nil when none did.
	Failed []bool
}
