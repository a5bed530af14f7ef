package driver

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// EarlyTolerance is how far ahead of the store's clock (Redis's TIME) a
// tick may be started. A replica whose clock runs ahead gets an
// *EarlyError instead, so that it cannot start ticks before the others.
const EarlyTolerance = 500 * time.Millisecond

// Request asks for the lease of one (task, entity).
type Request struct {
	Task   string
	Entity string
	TTL    time.Duration // lease time to live; renewed every TTL/3
	Reason Reason
	// Tick is the scheduled instant of a ReasonTick run. The acquire fails
	// with ErrAlreadyRan when a tick run for a tick >= Tick already started.
	// A run ByRecord (catch-up, backfill) has an older tick it runs: it
	// fails only when the run record (Record) says the entity ran Tick.
	Tick time.Time
	// Record keeps, for this long, the record of which entities ran Tick
	// (a bitmap per tick, driver-wide entity numbers): a grant of a
	// ReasonTick run, or one ByRecord, with Record sets the entity's bit.
	// A run ByRecord needs it. 0: no record.
	Record time.Duration
	// RecordOf, for a run ByRecord, names a record of Tick of its own to
	// decide it by (an operator's backfill that runs every entity again,
	// BackfillAll: its ID): it is granted when that record says its entity
	// has not run Tick, whatever Tick's own record says, and sets both. So
	// it runs each (entity, tick) once per name. "": Tick's own record.
	RecordOf string
	// Floor, for a ReasonTick run, moves that bound earlier: the acquire
	// fails when a tick run for a tick >= Floor started (an entity whose
	// zone changed ran its period's run in its old zone). Zero, or a Floor
	// after Tick: Tick.
	Floor time.Time
	// Queue, when the entity is busy, leaves a follow-up request that the
	// holder's release turns into one run after it.
	Queue bool
	// QueueMax, with Queue and a Tick, buffers up to this many ticks as
	// follow-ups, each run with its own tick, oldest first; past it the
	// oldest is dropped (AcquireReply.Dropped). 0 or 1: one follow-up,
	// carrying the latest tick. A buffered tick more than QueueAge older
	// than Tick is missed (AcquireReply.Missed); QueueAge 0: none is.
	QueueMax int
	QueueAge time.Duration
	// Replace, when the entity is busy, revokes its holder (as an unlock
	// does, with RenewReplaced and Replaced) and leaves a follow-up that
	// runs with ReasonReplaced at the holder's release, or at its lease's
	// expiry when it never releases (a frozen or cut-off holder). The
	// request's tick counts as run.
	Replace bool
	// Chunk names the part of a tick's entity stream this request belongs
	// to (ReasonTick only), when the whole part is in one AcquireBatch call,
	// its requests one after the other. Any string: the store sends a hash
	// of it. The replicas' fan-outs send the same
	// chunks (the same ids, in the same order) for the same tick: the first
	// to send one takes it whole, in the step that grants its leases; the
	// others get ErrAlreadyRan for all of it without their entities being
	// read. So several replicas do not multiply the work of a tick.
	Chunk string
	// From is the due entry this run carries out. It is acked when the lease
	// is granted, and when it is busy (becoming a follow-up with Queue).
	From *Due
	// Limits names the limits (Store.SetLimits) the run starts under: the
	// lease is asked for only once each of them has room, and the run
	// counts under them while its lease is held.
	Limits []string
	// Since is when the run was first asked for: its place in the lines of
	// limits with no room (LimitAsk). Zero: Tick for a tick's run, else
	// now.
	Since time.Time
	// HeadStart, Group, Weight and Grouped place the run in those lines
	// (LimitAsk's).
	HeadStart time.Duration
	Group     string
	Weight    int
	Grouped   bool
}

// ByRecord says whether a run of reason r is decided by the run record
// (Request.Record) rather than by its entity's last tick: a catch-up's or
// a backfill's, of an older tick than the entity may have run.
func ByRecord(r Reason) bool { return r == ReasonCatchUp || r == ReasonBackfill }

// Due is a pending request for a run: a reschedule, retry, trigger or
// queued follow-up.
type Due struct {
	Task    string
	Entity  string
	Reason  Reason
	Attempt int       // consecutive reschedules or retries so far
	Tick    time.Time // the tick the chain started from, if any
	At      time.Time // when it is due
	// Requests are the ids of the requests the run answers (see
	// NewRequestID). Enqueue merges them into a pending entry it joins.
	Requests []string
	// Claim is the driver's mark of a taken entry (Take sets it, Ack
	// reads it); "" for an entry not taken.
	Claim string
	// Shard is the shard of Task the entry is in (ShardName): the store
	// sets it at a take, where a driver's Task is the shard's name.
	Shard int
	// Shards is the shard count the store named Task's shard by, at an
	// Enqueue: a driver refuses the call with ErrShardsChanged when the
	// task is kept in another number now (a reshard). 0: not checked.
	Shards int
}

// LastRun describes the last finished run of a (task, entity), for status.
type LastRun struct {
	Task     string
	Entity   string
	Outcome  Outcome
	Reason   Reason
	Replica  string
	Fence    int64
	Started  time.Time
	Ended    time.Time
	LastTick time.Time
	Error    string // a failed run's error, its first MaxRunError bytes
	// By is who ended it with tickd unlock -force (outcome unlocked, on
	// Replica, the holder); "" otherwise.
	By string
}

// RunTick is the tick a run for r carries: its Tick, or its due entry's.
func (r *Request) RunTick() time.Time {
	if r.Tick.IsZero() && r.From != nil {
		return r.From.Tick
	}
	return r.Tick
}

// TickFloor is the tick at or after which a tick run of r counts as run:
// its Floor when it is before its Tick, else its Tick.
func (r *Request) TickFloor() time.Time {
	if !r.Floor.IsZero() && r.Floor.Before(r.Tick) {
		return r.Floor
	}
	return r.Tick
}

// PageQuery asks for one page of a task's entities (the ones the store
// knows: held, or run within StateTTL), for the console: a bounded amount
// of work whatever the number of entities.
type PageQuery struct {
	// Cursor is where the page starts: "" for the first, Page.Next after.
	Cursor string
	// Search keeps the entities whose id begins with it (or, with
	// Substring, contains it); "" keeps every one.
	Search    string
	Substring bool
	// Outcome keeps the entities whose last run had this outcome, or, for
	// "held", those whose lease is held; "" keeps every one.
	Outcome string
	// Size is the most rows a page holds; MaxScan the most entities it
	// looks at (a search may have to look at many for few rows).
	Size, MaxScan int
}

// EntityRow is one entity of a page.
type EntityRow struct {
	Entity string
	Held   *Held    // its lease, if held
	Last   *LastRun // its last finished run, if retained
}

// Page is a page of a task's entities.
type Page struct {
	Rows []EntityRow
	// Next is the cursor of the next page; "" when the walk is over.
	Next string
	// Scanned is about how many entities the page looked at; Capped says
	// it stopped at MaxScan before Size rows were found.
	Scanned int
	Capped  bool
}

// Matches says whether entity id is kept by q's search.
func (q PageQuery) Matches(id string) bool {
	if q.Substring {
		return strings.Contains(id, q.Search)
	}
	return strings.HasPrefix(id, q.Search)
}

// Keeps says whether r is kept by q's outcome filter.
func (q PageQuery) Keeps(r EntityRow) bool {
	switch q.Outcome {
	case "":
		return true
	case "held":
		return r.Held != nil
	}
	return r.Last != nil && string(r.Last.Outcome) == q.Outcome
}

// Pattern is q's search as an HSCAN MATCH pattern over escaped ids: escape
// leaves no glob character, so the id's text is matched as it is. A
// substring match of the escaped form can straddle an escape (%41 for
// "A"): rows are checked again on the decoded id.
func (q PageQuery) Pattern() string {
	switch {
	case q.Search == "":
		return ""
	case q.Substring:
		return "*" + Escape(q.Search) + "*"
	}
	return Escape(q.Search) + "*"
}

// ErrBadCursor is returned for a page cursor that no page gave (Page.Next).
var ErrBadCursor = errors.New("lease: bad cursor")

// ErrDuplicateReplica is matched by a *DuplicateReplicaError.
var ErrDuplicateReplica = errors.New("lease: another process announces the same replica id")

// DuplicateReplicaError says which other process announced this store's
// replica id.
type DuplicateReplicaError struct {
	Replica string
	Host    string    // the other process's host
	Since   time.Time // when it started announcing
}

func (e *DuplicateReplicaError) Error() string {
	return fmt.Sprintf("%v %q (on host %s, since %s): give each replica its own replica_id", ErrDuplicateReplica, e.Replica,
		e.Host, e.Since.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrDuplicateReplica) true.
func (e *DuplicateReplicaError) Is(target error) bool { return target == ErrDuplicateReplica }

// Replica is a replica's current announcement.
type Replica struct {
	ID      string
	Host    string
	Version string
	Tasks   []string
	Since   time.Time // when this process first announced (zero from an older tickd)
	Seen    time.Time // its last announcement
	Process string    // the announcing process's nonce (a store's own)
	// DuplicateOn is, while two live processes announce this replica id,
	// the host of the other one (as the last of them to find it saw it);
	// "" otherwise.
	DuplicateOn string
}

// Answers that are not a run's outcome.
const (
	// AnswerSkipped: the entity was busy and the task's on_busy is skip.
	AnswerSkipped Outcome = "skipped"
	// AnswerDropped: no replica runs the task.
	AnswerDropped Outcome = "dropped"
)

// EntityState is what the store knows of one (task, entity).
type EntityState struct {
	Held    *Held    // the lease, if someone holds it
	Last    *LastRun // the last finished run, if retained
	Pending *Due     // the pending request, if any
}

// ErrShardsChanged is a driver's answer to a call that named a task's
// shard by a shard count that is no longer the task's (a reshard moved
// it, or is moving it): the store reads the count again and names the
// shard anew. Nothing of the call was done.
var ErrShardsChanged = errors.New("lease: the task's shard count changed")

// ErrWaiting is Enqueue's error for a tick's run waiting for a limit when
// the same tick's run of the entity waits already (another replica's
// fan-out met the limit too): nothing was added.
var ErrWaiting = errors.New("lease: this tick's run of the entity waits already")

// ErrResharding is returned for a task whose shards are being moved
// (tickd migrate): nothing of it is granted, renewed, released or
// enqueued until the move ends.
var ErrResharding = errors.New("lease: the task is being resharded")

// ErrNotHeld is the answer to a release or renewal of a lease its holder
// no longer holds.
var ErrNotHeld = errors.New("lease: not held")

const (
	// MaxRequests bounds the ids one due entry carries: the newest are kept.
	MaxRequests = 32
	// RequestTTL is how long a request's answers are kept after the last.
	RequestTTL = time.Hour
)
