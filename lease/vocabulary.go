package lease

import "github.com/tickd/tickd/lease/driver"

// The store's vocabulary is the drivers' (package driver): these names are
// the same types and values, so that a caller of lease needs no other
// import.

type (
	// Reason says why a run happens.
	Reason = driver.Reason
	// Request asks for the lease of one (task, entity).
	Request = driver.Request
	// Outcome says how a run ended, as recorded for status.
	Outcome = driver.Outcome
	// Finished is what a run did, recorded at release for status.
	Finished = driver.Finished
	// Next asks, with a release, for another run of the same (task, entity).
	Next = driver.Next
	// Due is a pending request for a run.
	Due = driver.Due
	// Held describes a lease someone holds, for status.
	Held = driver.Held
	// LastRun describes the last finished run of a (task, entity).
	LastRun = driver.LastRun
	// PageQuery asks for one page of a task's entities.
	PageQuery = driver.PageQuery
	// EntityRow is one entity of a page.
	EntityRow = driver.EntityRow
	// Page is a page of a task's entities.
	Page = driver.Page
	// EntityState is what the store knows of one entity.
	EntityState = driver.EntityState
	// Unlocked is what an Unlock did.
	Unlocked = driver.Unlocked
	// Replica is a replica as it announced itself.
	Replica = driver.Replica
	// DuplicateReplicaError says another live process announced the same
	// replica id.
	DuplicateReplicaError = driver.DuplicateReplicaError
	// TickPart is one replica's part in one tick of a task.
	TickPart = driver.TickPart
	// TickRecord is one tick of a task.
	TickRecord = driver.TickRecord
	// Retention bounds what is kept of a task's history.
	Retention = driver.Retention
	// TickWrite is one replica's part of one tick, to be written.
	TickWrite = driver.TickWrite
	// HistoryRead asks for a task's newest tick records and actions.
	HistoryRead = driver.HistoryRead
)

// The reasons of a run.
const (
	ReasonTick       = driver.ReasonTick
	ReasonReschedule = driver.ReasonReschedule
	ReasonRetry      = driver.ReasonRetry
	ReasonTrigger    = driver.ReasonTrigger
	ReasonQueued     = driver.ReasonQueued
)

// The outcomes of a run.
const (
	OutcomeDone       = driver.OutcomeDone
	OutcomeReschedule = driver.OutcomeReschedule
	OutcomeFailed     = driver.OutcomeFailed
	OutcomeTimeout    = driver.OutcomeTimeout
	OutcomeLeaseLost  = driver.OutcomeLeaseLost
	OutcomeCanceled   = driver.OutcomeCanceled
	OutcomeUnlocked   = driver.OutcomeUnlocked
)

// Answers that are not a run's outcome.
const (
	AnswerSkipped = driver.AnswerSkipped
	AnswerDropped = driver.AnswerDropped
)

// The reasons a tick skips an entity, in TickPart.Skipped.
const (
	SkipBusy            = driver.SkipBusy
	SkipAlreadyRan      = driver.SkipAlreadyRan
	SkipQuarantined     = driver.SkipQuarantined
	SkipLimited         = driver.SkipLimited
	SkipSuperseded      = driver.SkipSuperseded
	SkipNotAcknowledged = driver.SkipNotAcknowledged
	SkipError           = driver.SkipError
	SkipStopped         = driver.SkipStopped
	SkipPaused          = driver.SkipPaused
)

const (
	// NumOutcomes is how many Outcomes there are.
	NumOutcomes = driver.NumOutcomes
	// EarlyTolerance is how far ahead of the store's clock a tick may be
	// started.
	EarlyTolerance = driver.EarlyTolerance
	// BatchSize bounds the entities one acquire or release round trip
	// carries; callers that gather requests (the scheduler's fan-out)
	// batch by it.
	BatchSize = driver.BatchSize
	// MaxRunError is how much of a failed run's error is kept.
	MaxRunError = driver.MaxRunError
	// MaxSourceError bounds the error of a failed entity source that a
	// tick's record keeps.
	MaxSourceError = driver.MaxSourceError
)

var (
	// ErrBadCursor is returned for a page cursor that no page gave.
	ErrBadCursor = driver.ErrBadCursor
	// ErrDuplicateReplica is matched by a *DuplicateReplicaError.
	ErrDuplicateReplica = driver.ErrDuplicateReplica
)

// AllOutcomes is every Outcome, in a fixed order.
func AllOutcomes() [NumOutcomes]Outcome { return driver.AllOutcomes() }

// MaxShards bounds a task's shards.
const MaxShards = driver.MaxShards

// ShardName is the name the driver knows shard s of task by (shards.go);
// ShardOf is the shard of entity among n.
var (
	ShardName = driver.ShardName
	ShardOf   = driver.ShardOf
)
