package report

import "github.com/tickd/tickd/tickdtype"

// The JSON documents are declared in tickdtype (stable); these are their
// names here.
type (
	Instant        = tickdtype.Instant
	StatusDoc      = tickdtype.StatusDoc
	ReplicaDoc     = tickdtype.ReplicaDoc
	ReplicationDoc = tickdtype.ReplicationDoc
	TaskDoc        = tickdtype.TaskDoc
	LeaseDoc       = tickdtype.LeaseDoc
	RunDoc         = tickdtype.RunDoc
	PauseInfoDoc   = tickdtype.PauseInfoDoc
	DueDoc         = tickdtype.DueDoc
	HistoryDoc     = tickdtype.HistoryDoc
	TickDoc        = tickdtype.TickDoc
	FailureDoc     = tickdtype.FailureDoc
	ActionDoc      = tickdtype.ActionDoc
	LimitDoc       = tickdtype.LimitDoc
	ClosingDoc     = tickdtype.ClosingDoc
	GroupDoc       = tickdtype.GroupDoc
	EntityDoc      = tickdtype.EntityDoc
	BackfillDoc    = tickdtype.BackfillDoc
)
