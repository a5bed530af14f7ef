package driver

import (
	"context"
	"time"
)

// Driver keeps a lease store's state: what differs between Redis and the
// in-process store. Package lease runs the protocol over it. Every method
// is one round trip; a driver answers as the conformance suite says,
// whatever it stores the state in. Its methods come in ten
// groups, each headed by its name: the grants, the due queue, the status
// reads, the pauses, the task registry, the history, the replica
// registry, the upkeep, the limits and the backfills.
type Driver interface {
	// Configure hands the driver the store's settings, once, before any
	// other call.
	Configure(cfg Config)

	// Grants: grants, renews, releases and unlocks leases.
	// Acquire asks for leases for Config.Replica, answering each
	// AcquireArg in order; Config.MaxTTL is the quarantine after a data
	// loss. An arg with no Token is left out (its reply is the zero
	// AcquireReply).
	Acquire(ctx context.Context, reqs []AcquireArg) ([]AcquireReply, error)
	Renew(ctx context.Context, ls []*Lease) ([]Renewal, error)
	// Release returns, per lease, whether a follow-up had been requested,
	// or ErrNotHeld.
	Release(ctx context.Context, rs []ReleaseArg) ([]ReleaseReply, error)
	// Unlock revokes (force false) or frees the lease of (task, entity).
	Unlock(ctx context.Context, task, entity, by string, force bool) (Unlocked, bool, error)
	// Taken says which of a tick's chunks (Request.Chunk) were taken.
	Taken(ctx context.Context, task string, tick time.Time, chunks []string) ([]bool, error)

	// DueQueue: keeps the runs asked for later (reschedules, retries, triggers,
	// follow-ups) and the answers to the requests they carry.
	// Enqueue stores d, due after delay: one per task and entity (an
	// earlier one covers it). A tick's run waiting for a limit supersedes
	// an older tick's waiting one, whose tick it returns; one that joins a
	// newer tick's, or another run asked for (a retry), is superseded, and
	// its own tick is returned.
	Enqueue(ctx context.Context, d Due, delay time.Duration) (superseded time.Time, err error)
	Take(ctx context.Context, limit int, visibility time.Duration, claimPrefix string) ([]Due, error)
	// Ack removes a taken due entry and answers its requests AnswerDropped.
	Ack(ctx context.Context, d Due) error
	// Answers reads a request's answers by entity; Forget deletes them.
	Answers(ctx context.Context, task, id string) (map[string]Outcome, error)
	Forget(ctx context.Context, task, id string) error

	// Status: reads what is held, what ran and what is due.
	Leases(ctx context.Context, task string, fn func(Held) error) error
	LastRuns(ctx context.Context, task string, fn func(LastRun) error) error
	DueEntries(ctx context.Context, task string, fn func(Due) error) error
	DueCount(ctx context.Context) (int, error)
	// EntityPage reads one page of a task's entities.
	EntityPage(ctx context.Context, task string, q PageQuery) (Page, error)
	// One reads the state of one entity.
	One(ctx context.Context, task, entity string) (EntityState, error)

	// Pauses: keeps the paused tasks: SetPaused pauses task with p, or
	// resumes it for p nil; Paused returns the paused tasks' pauses (one the
	// driver cannot read, another version's, as the zero PauseInfo: paused,
	// by nobody known, with no end).
	SetPaused(ctx context.Context, task string, p *PauseInfo) error
	Paused(ctx context.Context) (map[string]PauseInfo, error)
	// EndPause resumes task if its pause is still p (a pause whose end
	// passed, as Paused returned it); a pause made since stays.
	EndPause(ctx context.Context, task string, p PauseInfo) error

	// TaskRegistry: keeps every task a replica registered, by name (a
	// later registration of a name replaces the earlier). Registry returns
	// them in any order; a record the driver cannot read (another
	// version's) comes back with its Name alone.
	RegisterTasks(ctx context.Context, ts []TaskInfo) error
	Registry(ctx context.Context) ([]TaskInfo, error)
	ForgetTask(ctx context.Context, task string) (bool, error)
	// Shards returns how many shards (ShardName) each task of want is kept
	// in: the count recorded for it, or else want's, which it records (1
	// for a task found with state in its one shard already); a want of 0
	// only reads. A task with no count recorded is left out. Only an
	// operator's migration changes a recorded count, so that every replica
	// looks for an entity in one place.
	Shards(ctx context.Context, want map[string]int) (map[string]int, error)

	// History: keeps what happened: tick records, failures and actions.
	// RecordTicks puts parts in their tick records, enforcing each one's
	// retention; Ticks returns task's newest tick records, newest first,
	// leaving out any it cannot read (another version's).
	RecordTicks(ctx context.Context, ws []TickWrite) error
	Ticks(ctx context.Context, task string, limit int) ([]TickRecord, error)
	// Push adds failures and actions to their tasks' lists, each list
	// cut to its push's Keep; Failures and Actions return task's newest,
	// newest first, leaving out any the driver cannot read (another
	// version's). Task "" is the prefix's own lists.
	Push(ctx context.Context, ps []ListPush) error
	Failures(ctx context.Context, task string, limit int) ([]Failure, error)
	Actions(ctx context.Context, task string, limit int) ([]Action, error)
	// Histories returns, for each read, its task's newest tick records
	// (as Ticks) and actions (as Actions), newest first, in one round trip.
	Histories(ctx context.Context, reads []HistoryRead) (ticks [][]TickRecord, actions [][]Action, err error)

	// ReplicaRegistry: keeps the live replicas and the tasks each runs.
	// Announce records the tasks this replica runs, and which process
	// announces them, for ttl; a *DuplicateReplicaError when another live
	// process announced the same replica id.
	Announce(ctx context.Context, a Announcement, ttl time.Duration) error
	// Replicas lists the replicas whose announcement is current.
	Replicas(ctx context.Context) ([]Replica, error)
	// Known says whether a replica whose announcement is current runs task.
	Known(ctx context.Context, task string) (bool, error)

	// Upkeep: is the store's housekeeping: reachability, the sweep of old state,
	// the watch for a data loss.
	Ping(ctx context.Context) error
	// Sweep forgets the entities neither held nor touched within StateTTL.
	Sweep(ctx context.Context) error
	// Claim says whether this process is the first to claim name within
	// ttl: the replicas sharing a store do a thing once between them, not
	// once each (the sweep of an interval, a tick's heartbeat ping),
	// whichever asks first. name is any string.
	Claim(ctx context.Context, name string, ttl time.Duration) (bool, error)
	// CheckEpochs finds a data loss: it gives every bucket found without an
	// epoch one, quarantined for Config.MaxTTL from now, and returns the
	// longest quarantine left. It does nothing before the store's first
	// grant, enqueue, take or announce.
	CheckEpochs(ctx context.Context) (time.Duration, error)

	// Limits: keeps the limits' shared state: each replica's runs under each
	// limit (counted while the replica renews them), the rate's schedule, and
	// the budgets an API closed. A limit's keys are in one slot of their own.
	// TakeLimit asks for a start under lim for each of asks. Every run that
	// asks waits in line, per budget key, the oldest (Since) first across
	// replicas, tasks and ticks: a start is granted to the runs whose
	// place in the line is within the room the budget has (under the
	// concurrency, every replica's runs counted; at the rate; not closed).
	// The others keep their place (the older Since of their asks) while
	// they ask again within the wait they are told and LimitWaitGrace. A
	// granted start counts as one of the store's runs (Config.Holder) under
	// its key until SetLimitRuns says otherwise; the store's runs count for
	// ttl from its last call. Config.MaxTTL is the quarantine after a data
	// loss.
	TakeLimit(ctx context.Context, lim Limit, ttl time.Duration, asks []LimitAsk) ([]LimitGrant, error)
	// SetLimitRuns sets the store's runs (Config.Holder) under lim by key
	// (a key left out has none), counted for ttl, and gives back the rate's
	// starts of the keys of giveBack, one each: starts granted that no run
	// used.
	SetLimitRuns(ctx context.Context, lim Limit, ttl time.Duration, runs map[string]int, giveBack []string) error
	// CloseLimit closes lim's budget key (as TakeLimit's keys) for d, for
	// why: no start is granted under it until then.
	CloseLimit(ctx context.Context, lim Limit, key string, d time.Duration, why string) error
	// LearnRate tells an auto limit's budget key what an answer said of
	// its rate (RateSeen; the rules are AutoMargin's).
	LearnRate(ctx context.Context, lim Limit, key string, seen RateSeen) error
	// LimitState reads lim's runs by holder and the budgets closed.
	LimitState(ctx context.Context, lim Limit) (LimitState, error)

	// Backfills: keeps the operators' backfills, each with its progress
	// and the store that runs it, and reads the run record they go by.
	// SaveBackfill writes b (by its ID; Cancelled, Holder and Until aside)
	// and makes Config.Holder its holder for hold from now (0: none), and
	// answers true; false, writing nothing, when b was cancelled, or
	// another store holds it (its Until has not passed).
	SaveBackfill(ctx context.Context, b Backfill, hold time.Duration) (bool, error)
	// Backfills reads every backfill, in any order, forgetting those that
	// ended more than BackfillKept ago.
	Backfills(ctx context.Context) ([]Backfill, error)
	// CancelBackfill marks backfill id cancelled by by (its holder's next
	// save fails); false when there is no such backfill.
	CancelBackfill(ctx context.Context, id, by string) (bool, error)
	// RunRecord reads task's run record (Request.Record) of each of ticks:
	// whether it is kept, and if so which of entities ran the tick.
	RunRecord(ctx context.Context, task string, ticks []time.Time, entities []string) ([]TickRan, error)
	// MarkFailed keeps, for keep, that entity's run of task's tick failed
	// (failed) or no longer has (!failed: a later run of it succeeded), in
	// the tick's run record (TickRan.Failed): for an entity the record
	// numbers (a grant with Request.Record), else it does nothing.
	MarkFailed(ctx context.Context, task string, tick time.Time, entity string, failed bool, keep time.Duration) error
}

// Config is what a driver is told of the store it serves.
type Config struct {
	Replica string // this process's id, recorded as the holder
	// Holder is what the store's runs under a limit count as (its replica
	// and its process): TakeLimit's and SetLimitRuns'.
	Holder   string
	StateTTL time.Duration // how long per-entity state is kept after its last write
	Clock    Clock         // the in-process driver's clock (Redis has its own)
	// MaxTTL is the store's longest lease TTL: the quarantine of a store
	// found to have lost its data.
	MaxTTL func() time.Duration
}

// Lease is a held lease as a driver sees it: its ids, its token and TTL,
// and, at a release, what the run carried.
type Lease struct {
	Task, Entity string
	Token        string
	TTL          time.Duration
	Reason       Reason
	Tick         time.Time
	Fence        int64
	Requests     []string
	// Shards is the shard count Task (a shard's name) was named by: a
	// driver refuses a renewal or release with ErrShardsChanged when the
	// task is kept in another number now. 0: not checked.
	Shards int
}

// AcquireArg is one request of an Acquire.
type AcquireArg struct {
	Req *Request // the caller's
	// Token is the lease's, unique to it: letters, digits, '-' and '.'.
	// The requests of a chunk (Req.Chunk) sent one after the other have
	// the tokens P.1, P.2, … of one prefix P, so that a driver may send
	// them as P alone.
	Token string
	// Shards is the shard count Req.Task (a shard's name) was named by: a
	// driver refuses the grant with ErrShardsChanged when the task is kept
	// in another number now. 0: not checked.
	Shards int
}

// GrantStatus is how a driver answers an acquire for one entity.
type GrantStatus string

// The answers of an acquire.
const (
	GrantOK         GrantStatus = "ok"         // granted, with a fence
	GrantBusy       GrantStatus = "busy"       // held: by Holder since At, with Fence
	GrantRan        GrantStatus = "ran"        // a run for a tick >= this one started (at At)
	GrantQuarantine GrantStatus = "quarantine" // a data loss: Left until anything is granted
	GrantEarly      GrantStatus = "early"      // the tick is Left in the store's future
)

// AcquireReply is one entity's answer of an Acquire.
type AcquireReply struct {
	Status GrantStatus
	Fence  int64
	At     time.Time // busy: the holder's since; ran: the last tick run
	Holder string
	// Replaced: busy, and this acquire revoked the holder (Request.Replace);
	// false when it was revoked before.
	Replaced bool
	// Dropped and Missed: busy, and the ticks this acquire took out of the
	// entity's buffer (Request.QueueMax, QueueAge): they never run.
	Dropped, Missed []time.Time
	Left            time.Duration // quarantine or early: time left
	// Err: this request failed where others of the call did not (on a
	// Redis Cluster, a master that does not answer, or a shard refusing a
	// name by an old count: ErrShardsChanged).
	Err error
}

// Renewal is a renewal round's answer for one lease.
type Renewal uint8

// The answers of a renewal.
const (
	RenewLost     Renewal = iota // expired, or held under another token
	RenewOK                      // renewed: its trust window moves
	RenewRevoked                 // an operator revoked it (Store.Unlock)
	RenewReplaced                // a newer tick revoked it (Request.Replace)
)

// ReleaseArg is one lease to release, what its run did, and the run asked
// for after it, if any.
type ReleaseArg struct {
	Lease    *Lease
	Finished Finished
	Next     *Next
}

// ReleaseReply is a release's answer for one lease.
type ReleaseReply struct {
	FollowUp bool
	// Superseded is the tick of the entity's run waiting for a limit that
	// the run enqueued at the release (Next, or the follow-up) took the
	// place of (an entity has one due run), zero for none: that tick's
	// record counts it as superseded.
	Superseded time.Time
	Err        error
}

// ListPush is what to add to one task's lists of failures and actions,
// oldest first (the last pushed is the newest), and how many of each list
// to keep (Keep.Failures, Keep.Actions: at least 1).
type ListPush struct {
	Task     string
	Failures []Failure
	Actions  []Action
	Keep     Retention
}

// Announcement is what a replica announces of itself; the driver adds
// when (Until, Since, Seen: ms by the store's clock).
type Announcement struct {
	Until   int64
	Tasks   []string
	Process string // the announcing store's nonce
	// Shards are the names (ShardName) of Tasks' other shards: their due
	// entries are this replica's to take too. They are not announced.
	Shards  []string
	Host    string
	Version string
	Since   int64 // first announcement of this process (ms)
	Seen    int64 // last announcement (ms)
}

// RevocationWatcher is a driver that says at once when another process
// unlocks a lease it holds (the Redis driver: unlock.lua publishes it), so
// that the holder's run stops then rather than at its next renewal. A
// driver without it is still correct: the renewal finds the lease gone.
type RevocationWatcher interface {
	// WatchRevocations calls fn for each lease of this store revoked
	// elsewhere (task is the driver's name of its shard; how: revoked by
	// an unlock, freed by one, or replaced by a newer tick) until ctx is
	// done, and reports whether it watches at all.
	WatchRevocations(ctx context.Context, fn func(task, entity string, fence int64, how Revocation)) bool
}

// Revocation says how a lease was taken from its holder.
type Revocation uint8

// The revocations.
const (
	Revoked  Revocation = iota // by an unlock: stop, then release
	Freed                      // by unlock -force: the entity is free already
	Replaced                   // by a newer tick (Request.Replace): stop, then release
)

// Admin is what a driver that keeps its state on a server offers beside
// Driver: the operator's tools, which the store's methods of the same
// names reach (the Redis driver has them; the in-process one has none).
type Admin interface {
	// CheckLayout returns an error when the server holds keys of another
	// key layout than the driver's.
	CheckLayout(ctx context.Context) error
	// Migrate moves the keys of an older layout into the driver's.
	Migrate(ctx context.Context) (Migrated, error)
	// Reshard keeps task in n shards from now on, moving its entities'
	// state while replicas run it.
	Reshard(ctx context.Context, task string, n int) (Resharded, error)
	// Replication probes the server's replicas as a lease write would.
	Replication(ctx context.Context) (Replication, error)
	// InitEpoch declares that the server holds no lease any process could
	// still trust (a server new to tickd): no data-loss quarantine.
	InitEpoch(ctx context.Context) error
}
