package tickdtype

import (
	"encoding/json"
	"time"
)

// The documents of `tickd status -json`, `tickd history -json` and the
// console's JSON (tickd.Status, tickd.History): their fields are only ever
// added to, never renamed or removed.

// Instant is a time written as RFC 3339 UTC, or null for the zero time.
type Instant time.Time

// MarshalJSON writes t as RFC 3339 UTC, or null for the zero time.
func (t Instant) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(time.Time(t).UTC().Format(time.RFC3339Nano))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *Instant) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = Instant{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	*t = Instant(v)
	return err
}

// Time is the Instant as a time.Time.
func (t Instant) Time() time.Time { return time.Time(t) }

// StatusDoc is `tickd status -json`.
type StatusDoc struct {
	Replication ReplicationDoc `json:"replication"`
	Replicas    []ReplicaDoc   `json:"replicas"`
	Tasks       []TaskDoc      `json:"tasks"`
	// Locks are the keys tickd lock holds (entity: the key), the first
	// -limit; lock_count counts them all.
	Locks     []LeaseDoc `json:"locks"`
	LockCount int        `json:"lock_count"`
	Limits    []LimitDoc `json:"limits"`
	// Backfills are the backfills kept (tickd backfill), of every task
	// or of the one asked for, the newest first.
	Backfills []BackfillDoc `json:"backfills"`
}

// BackfillDoc is a backfill, in `tickd backfill -json` (as created, as
// listed, or as it ended with -wait), `tickd status -json` and the
// console's JSON.
type BackfillDoc struct {
	ID       string   `json:"id"`
	Task     string   `json:"task"`
	From     Instant  `json:"first_tick"` // the range's first tick
	To       Instant  `json:"last_tick"`  // its last
	Entities []string `json:"entities"`   // [] for every entity of the task
	// Only is which (entity, tick)s it runs: "missing", those no one ran,
	// or "all", every one again (once).
	Only    string  `json:"only"`
	By      string  `json:"by"`
	Created Instant `json:"created"`
	// Ticks is the range's ticks; Unknown, those left out (their runs are
	// not known); Done, those fanned out.
	Ticks   int `json:"ticks"`
	Unknown int `json:"unknown"`
	Done    int `json:"done"`
	// Ran: runs started; Skipped: (entity, tick)s that had run before;
	// Busy: left busy (a backfill of the range again runs them).
	Ran     int64 `json:"ran"`
	Skipped int64 `json:"skipped"`
	Busy    int64 `json:"busy"`
	// Failed: its runs that failed or timed out, counted once they ended;
	// Left: the ticks still to fan out.
	Failed int64 `json:"failed"`
	Left   int   `json:"left"`
	// State is "waiting" (no replica runs it yet), "running", "ended" or
	// "cancelled".
	State     string  `json:"state"`
	Holder    string  `json:"holder"`
	Cursor    Instant `json:"cursor"` // the newest tick fanned out; null: none yet
	Ended     Instant `json:"ended"`
	Cancelled string  `json:"cancelled_by"`
	// Runs, for a plan (-dry-run, or as created): the runs it would start
	// as the run record says now; -1 in a listing.
	Runs int64 `json:"runs"`
}

// ReplicaDoc is a running replica, as it last announced itself.
type ReplicaDoc struct {
	ID       string   `json:"id"`
	Host     string   `json:"host"`
	Version  string   `json:"version"`
	Tasks    []string `json:"tasks"`
	Since    Instant  `json:"since"`
	LastSeen Instant  `json:"last_seen"`
	// DuplicateOn is the host of another live process announcing this
	// replica id; "" when none.
	DuplicateOn string `json:"duplicate_on"`
}

// ReplicationDoc is status's view of the Redis replicas: what the primary
// reports, and whether a lease write made now is acknowledged.
type ReplicationDoc struct {
	Role           string `json:"role"`
	ReplicasOnline int    `json:"replicas_online"`
	ReplicaAcks    string `json:"replica_acks"`
	AcksWanted     int    `json:"acks_wanted"`
	AcksNow        int    `json:"acks_now"`
	Acknowledged   bool   `json:"acknowledged"`
}

// TaskDoc is one task's status (StatusDoc.Tasks).
type TaskDoc struct {
	Name     string `json:"name"`
	Schedule string `json:"schedule"` // as written: `every 15m`, `cron "…"`
	Timezone string `json:"timezone"`
	// InConfig is false for a task the config does not list but the task
	// registry remembers (a replica ran it); LastRegistered is when a
	// replica last said it ran it, and by whom.
	InConfig         bool         `json:"in_config"`
	LastRegistered   Instant      `json:"last_registered"`
	LastRegisteredBy string       `json:"last_registered_by"`
	NextTick         Instant      `json:"next_tick"`
	Paused           bool         `json:"paused"`
	Pause            PauseInfoDoc `json:"pause"`       // empty, with null instants, when not paused
	Flags            []string     `json:"flags"`       // not_firing, failing, starved: the ones up
	NotFiring        string       `json:"not_firing"`  // why it is not firing; "" when it is
	LastTick         TickDoc      `json:"latest_tick"` // state "none" and tick null before the first
	Leases           []LeaseDoc   `json:"leases"`
	LeaseCount       int          `json:"lease_count"`
	LastRuns         []RunDoc     `json:"last_runs"`
	LastRunCount     int          `json:"last_run_count"`
	Due              []DueDoc     `json:"due"`
	DueCount         int          `json:"due_count"`
	// DueComplete says due_count counts every pending run; otherwise (a
	// task with more pending than status looks at without -all) it is a
	// lower bound.
	DueComplete bool `json:"due_complete"`
	// EntitiesScanned is how many entities the leases and last runs were
	// read from; Complete says that was every one (status -all, or a task
	// of fewer than the bound): otherwise the counts are of those.
	EntitiesScanned int  `json:"entities_scanned"`
	Complete        bool `json:"complete"`
	// Shards is the shard count recorded in Redis, which every replica
	// uses; ConfigShards what the config read says (tickd migrate makes
	// them agree).
	Shards       int `json:"shards"`
	ConfigShards int `json:"config_shards"`
}

// LeaseDoc is a lease someone holds (TaskDoc.Leases, StatusDoc.Locks).
type LeaseDoc struct {
	Entity   string  `json:"entity"`
	Holder   string  `json:"holder"`
	Since    Instant `json:"since"`
	AgeS     float64 `json:"age_s"`
	Fence    int64   `json:"fence"`
	TTLLeftS float64 `json:"ttl_left_s"`
	Reason   string  `json:"reason"`
	// Revoked: an operator unlocked it; free once its holder has stopped.
	Revoked bool `json:"revoked"`
}

// RunDoc is an entity's last finished run (TaskDoc.LastRuns).
type RunDoc struct {
	Entity    string  `json:"entity"`
	Outcome   string  `json:"outcome"`
	Reason    string  `json:"reason"`
	Replica   string  `json:"replica"` // the replica that ran it; "" for an unlock
	By        string  `json:"by"`      // who unlocked it; "" for a run
	Fence     int64   `json:"fence"`
	Started   Instant `json:"started"`
	Ended     Instant `json:"ended"`
	DurationS float64 `json:"duration_s"`
	LastTick  Instant `json:"last_tick"`
	Error     string  `json:"error"` // a failed run's error; "" otherwise
}

// EntityDoc is `tickd status -json TASK ENTITY`, and the console's
// /api/tasks/TASK/entity?id=ENTITY: one entity of a task, its attributes
// as its source gives them now, its zone, and its lease, last run and
// pending run (each a list of at most one).
type EntityDoc struct {
	Task   string `json:"task"`
	Entity string `json:"entity"`
	// Source says where the attributes were read: "entities from …".
	Source string `json:"source"`
	// SourceError says why the source was not read ("" when it was): a
	// failure, or an entities_command, which the console does not run.
	SourceError string `json:"source_error"`
	// Listed: the source lists the entity now (false when it was not read).
	Listed     bool              `json:"listed"`
	Attributes map[string]string `json:"attributes"`
	// Timezone is the zone its ticks are in: its own (the task's
	// timezone_from names its attribute), else the task's; "" for a zone
	// that is unknown (its runs are skipped, counted unknown_zone).
	Timezone string     `json:"timezone"`
	NextTick Instant    `json:"next_tick"` // in Timezone; null when paused or the zone is unknown
	Leases   []LeaseDoc `json:"leases"`
	LastRuns []RunDoc   `json:"last_runs"`
	Due      []DueDoc   `json:"due"`
}

// PauseInfoDoc is who paused a task, when, why, and until when (null: until
// resumed).
type PauseInfoDoc struct {
	By     string  `json:"by"`
	At     Instant `json:"at"`
	Reason string  `json:"reason"`
	Until  Instant `json:"until"`
}

// DueDoc is a pending run: a reschedule, retry, trigger or queued
// follow-up (TaskDoc.Due).
type DueDoc struct {
	Entity  string  `json:"entity"`
	Reason  string  `json:"reason"`
	Attempt int     `json:"attempt"`
	Tick    Instant `json:"tick"`
	DueAt   Instant `json:"due_at"`
}

// HistoryDoc is `tickd history -json`.
type HistoryDoc struct {
	Task      string       `json:"task"`
	Flags     []string     `json:"flags"`      // not_firing, failing, starved: the ones up
	NotFiring string       `json:"not_firing"` // why it is not firing; "" when it is
	Ticks     []TickDoc    `json:"ticks"`
	Failures  []FailureDoc `json:"failures"`
	Actions   []ActionDoc  `json:"actions"`
}

// TickDoc is one tick of the history; a missed one has no replicas. The lag
// and duration are 0 when no run started (runs 0).
type TickDoc struct {
	Tick  Instant `json:"tick"`
	State string  `json:"state"` // complete, running, incomplete, missed, paused
	// Reason says why, in a few words (history.Reason): "on time", "late
	// by 2.1s", "paused", "missed", "quarantined"…
	Reason string `json:"reason"`
	// PausedBy and PauseReason: for a paused row (the ticks one pause held
	// back, from tick on), who paused and why; "" otherwise.
	PausedBy       string         `json:"paused_by"`
	PauseReason    string         `json:"pause_reason"`
	Replicas       []string       `json:"replicas"`
	Entities       int            `json:"entities"`
	Runs           int            `json:"runs"`
	Outcomes       map[string]int `json:"outcomes"`
	Skipped        map[string]int `json:"skipped"`
	SourceFailed   bool           `json:"source_failed"`
	SourceError    string         `json:"source_error"` // why, with the end of a command's stderr; "" when it did not fail
	FirstStartLagS float64        `json:"first_start_lag_s"`
	DurationS      float64        `json:"duration_s"` // from the tick to its last run's end
	// Zones are the zones whose entities the tick served, for a task whose
	// entities tick in zones of their own (timezone_from); [] otherwise.
	Zones []string `json:"zones"`
}

// FailureDoc is a failed run that history keeps (HistoryDoc.Failures).
type FailureDoc struct {
	Entity    string  `json:"entity"`
	Tick      Instant `json:"tick"`
	Reason    string  `json:"reason"`
	Fence     int64   `json:"fence"`
	Replica   string  `json:"replica"`
	StartedAt Instant `json:"started_at"`
	EndedAt   Instant `json:"ended_at"`
	Outcome   string  `json:"outcome"`
	Error     string  `json:"error"`
	Output    string  `json:"output"`
}

// ActionDoc is an operator's action that history keeps (HistoryDoc.Actions).
type ActionDoc struct {
	At       Instant  `json:"at"`
	By       string   `json:"by"`
	Action   string   `json:"action"`
	Entities []string `json:"entities"`
	Reason   string   `json:"reason"`
	Until    Instant  `json:"until"`
	Detail   string   `json:"detail"`
}

// LimitDoc is a limit in `tickd status -json` and the console's JSON.
type LimitDoc struct {
	Name        string       `json:"name"`
	Says        string       `json:"says"`
	Concurrency int          `json:"concurrency"` // 0: no bound
	Rate        string       `json:"rate"`        // "" : no bound
	Per         string       `json:"per"`         // all | entity
	Tasks       []string     `json:"tasks"`
	Runs        int          `json:"runs"`    // across the replicas
	Busiest     int          `json:"busiest"` // per entity: the most runs of one entity
	Closed      []ClosingDoc `json:"closed"`  // soonest to open first
	Waiting     int          `json:"waiting"` // runs waiting in the limit's line
	// OldestWait is how long the oldest waiting run has waited (since its
	// tick), 0 for none; OldestTask and OldestEntity say whose.
	OldestWait   float64 `json:"oldest_wait_s"`
	OldestTask   string  `json:"oldest_task"`
	OldestEntity string  `json:"oldest_entity"`
	// For a limit with fair_by: the groups with runs waiting, the starts
	// of the last minute, how many groups got less than half their fair
	// share of them while they waited all along, and the groups that have
	// waited longest (at most 20, longest first). 0 and [] for another.
	// For a limit with rate = "auto": the rate learned, starts a second
	// (0 before any answer said one or taught it), and what from.
	LearnedRate      float64    `json:"learned_rate"`
	RateSource       string     `json:"rate_source"`
	GroupsWaiting    int        `json:"groups_waiting"`
	StartsLastMinute int        `json:"starts_last_minute"`
	GroupsStarved    int        `json:"groups_starved"`
	Groups           []GroupDoc `json:"groups"`
}

// GroupDoc is a group of a fair limit's line: its runs waiting, how long
// its oldest has waited, its weight, its starts of the last minute and
// the share its weight was owed of them, and whether it is starved.
type GroupDoc struct {
	Group      string  `json:"group"`
	Waiting    int     `json:"waiting"`
	OldestWait float64 `json:"oldest_wait_s"`
	Weight     int     `json:"weight"`
	Started    int     `json:"started_last_minute"`
	FairShare  float64 `json:"fair_share"`
	Starved    bool    `json:"starved"`
}

// ClosingDoc is a budget an API closed: the limit's one (entity "") or an
// entity's.
type ClosingDoc struct {
	Entity string  `json:"entity"`
	Until  Instant `json:"until"`
	Reason string  `json:"reason"`
}
