package driver

import "github.com/tickd/tickd/tickdtype"

// The vocabulary the contract shares with the stable packages is declared
// in tickdtype; these names are the same types.
type (
	Reason      = tickdtype.Reason
	Outcome     = tickdtype.Outcome
	Finished    = tickdtype.Finished
	Next        = tickdtype.Next
	Held        = tickdtype.Held
	Unlocked    = tickdtype.Unlocked
	Clock       = tickdtype.Clock
	ReplicaAcks = tickdtype.ReplicaAcks
)

// The reasons, outcomes and acknowledgement settings of tickdtype.
const (
	ReasonTick       = tickdtype.ReasonTick
	ReasonReschedule = tickdtype.ReasonReschedule
	ReasonRetry      = tickdtype.ReasonRetry
	ReasonTrigger    = tickdtype.ReasonTrigger
	ReasonQueued     = tickdtype.ReasonQueued
	ReasonReplaced   = tickdtype.ReasonReplaced
	ReasonCatchUp    = tickdtype.ReasonCatchUp
	ReasonBackfill   = tickdtype.ReasonBackfill

	OutcomeDone       = tickdtype.OutcomeDone
	OutcomeReschedule = tickdtype.OutcomeReschedule
	OutcomeFailed     = tickdtype.OutcomeFailed
	OutcomeTimeout    = tickdtype.OutcomeTimeout
	OutcomeLeaseLost  = tickdtype.OutcomeLeaseLost
	OutcomeCanceled   = tickdtype.OutcomeCanceled
	OutcomeUnlocked   = tickdtype.OutcomeUnlocked
	OutcomeReplaced   = tickdtype.OutcomeReplaced

	NumOutcomes = tickdtype.NumOutcomes
	MaxRunError = tickdtype.MaxRunError

	AcksAuto  = tickdtype.AcksAuto
	AcksNever = tickdtype.AcksNever
)

// AllOutcomes is tickdtype.AllOutcomes.
func AllOutcomes() [NumOutcomes]Outcome { return tickdtype.AllOutcomes() }
