// Package tickdtype is tickd's vocabulary: why a run happens, how it
// ended, what its release asks for next, what an unlock found, the clock
// tickd reads, how many Redis replicas a lease write waits for. Every
// other package of tickd (the stable ones, lease's driver contract, the
// drivers) names these types from here, so that a program that uses
// leases alone, a Go handler and a driver all speak of the same things,
// and a stable signature never names the driver contract, which is not
// yet stable. It imports nothing of tickd's.
package tickdtype

import (
	"slices"
	"strconv"
	"time"
)

// Reason says why a run happens.
type Reason string

// The reasons of a run.
const (
	ReasonTick       Reason = "tick"
	ReasonReschedule Reason = "reschedule"
	ReasonRetry      Reason = "retry"
	ReasonTrigger    Reason = "trigger"
	ReasonQueued     Reason = "queued"
	// ReasonReplaced is the run of a tick that found its entity busy
	// under on_busy = "replace": it starts once the holder it revoked ends.
	ReasonReplaced Reason = "replaced"
	// ReasonCatchUp is the run of a tick missed while no replica ran the
	// task, caught up later (catch_up_runs = "all").
	ReasonCatchUp Reason = "catch_up"
	// ReasonBackfill is the run of a past tick an operator backfills
	// (tickd backfill).
	ReasonBackfill Reason = "backfill"
)

// Outcome says how a run ended, as recorded for status.
type Outcome string

// The outcomes of a run.
const (
	OutcomeDone       Outcome = "done"
	OutcomeReschedule Outcome = "reschedule" // done for now, asked to run again
	OutcomeFailed     Outcome = "failed"
	OutcomeTimeout    Outcome = "timeout"
	OutcomeLeaseLost  Outcome = "lease_lost"
	OutcomeCanceled   Outcome = "canceled" // stopped by shutdown, or never begun: handed over
	// OutcomeUnlocked records an operator's Unlock of a held lease.
	OutcomeUnlocked Outcome = "unlocked"
	// OutcomeReplaced records a run stopped because a newer tick replaced
	// it (on_busy = "replace").
	OutcomeReplaced Outcome = "replaced"
)

// allOutcomes is every Outcome; its length is a constant (NumOutcomes),
// for arrays counted by outcome.
var allOutcomes = [...]Outcome{OutcomeDone, OutcomeReschedule, OutcomeFailed, OutcomeTimeout, OutcomeLeaseLost, OutcomeCanceled, OutcomeUnlocked, OutcomeReplaced}

// NumOutcomes is how many Outcomes there are.
const NumOutcomes = len(allOutcomes)

// AllOutcomes is every Outcome, in a fixed order (an array: a caller's
// copy, no global to change).
func AllOutcomes() [NumOutcomes]Outcome { return allOutcomes }

// Index is o's position in AllOutcomes, or -1 when o is no Outcome of
// tickd's.
func (o Outcome) Index() int { return slices.Index(allOutcomes[:], o) }

// MaxRunError bounds the error text a run's record keeps (Finished.Error).
const MaxRunError = 200

// Finished is what a run did, recorded at its release for status.
type Finished struct {
	Outcome Outcome
	Started time.Time
	Ended   time.Time
	// Error is a failed run's error, kept as its last run's (cut to
	// MaxRunError bytes).
	Error string
}

// Next asks, atomically with a release, for another run of the same
// (task, entity) after Delay. It is durable: any replica carries it out.
type Next struct {
	Reason  Reason
	Delay   time.Duration
	Attempt int
	// HandOver says the run did not do its work (stopped by shutdown, or
	// never begun): the next run answers its requests in its stead.
	HandOver bool
}

// Held is a lease as an operator sees it.
type Held struct {
	Task   string
	Entity string
	Holder string
	Since  time.Time
	Fence  int64
	Reason Reason
	TTL    time.Duration // time left
	// Revoked: an operator unlocked it; its holder is told to stop, and it
	// is free once released or after TTL.
	Revoked bool
}

// Unlocked is what an unlock did to a held lease.
type Unlocked struct {
	// Held is the lease as it was found; its TTL is how long it has left
	// at most: a revoked lease is free by then, released or not.
	Held
	Freed   bool // force: the lease is free now
	Already bool // it had been revoked before: nothing changed
	// Told: this store held the lease, and its run was told to stop at
	// once; otherwise the holder hears it at its next renewal.
	Told bool
}

// Clock reads the wall clock: tickd's one clock interface, for the lease
// store, its drivers, the scheduler and the daemon. Tests inject offsets
// through it.
type Clock interface{ Now() time.Time }

// ReplicaAcks is how many of the primary's replicas must have a lease
// write (a grant or a renewal) before the store trusts it: after a
// failover to a replica that lacked the write, a second holder could be
// granted while the first still runs. The zero value is AcksAuto.
type ReplicaAcks int

const (
	// AcksAuto waits for every replica the primary reports online, read
	// from INFO replication at most a second ago; a primary with none does
	// not wait.
	AcksAuto ReplicaAcks = 0
	// AcksNever never waits: a failover may then lose grants that runs
	// were started under.
	AcksNever ReplicaAcks = -1
)

func (a ReplicaAcks) String() string {
	switch {
	case a == AcksAuto:
		return "auto"
	case a < 0:
		return "0"
	}
	return strconv.Itoa(int(a))
}
