package report

import (
	"encoding/json"
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
)

// Instant is a time written as RFC 3339 UTC, or null for the zero time.
type Instant time.Time

func (t Instant) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(time.Time(t).UTC().Format(time.RFC3339Nano))
}

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

// Seconds is a duration in Seconds, for a key ending in _s.
func Seconds(d time.Duration) float64 { return d.Seconds() }

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

func ReplicaDocs(rs []driver.Replica) []ReplicaDoc {
	out := make([]ReplicaDoc, len(rs))
	for i, r := range rs {
		out[i] = ReplicaDoc{ID: r.ID, Host: r.Host, Version: r.Version, Tasks: append([]string{}, r.Tasks...),
			Since: Instant(r.Since), LastSeen: Instant(r.Seen), DuplicateOn: r.DuplicateOn}
	}
	return out
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

func ReplicationDocOf(r driver.Replication) ReplicationDoc {
	return ReplicationDoc{Role: r.Role, ReplicasOnline: r.Online, ReplicaAcks: r.Mode.String(), AcksWanted: r.Want,
		AcksNow: r.Got, Acknowledged: r.Err == nil}
}

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

// PauseInfoDoc is who paused a task, when, why, and until when (null: until
// resumed).
type PauseInfoDoc struct {
	By     string  `json:"by"`
	At     Instant `json:"at"`
	Reason string  `json:"reason"`
	Until  Instant `json:"until"`
}

type DueDoc struct {
	Entity  string  `json:"entity"`
	Reason  string  `json:"reason"`
	Attempt int     `json:"attempt"`
	Tick    Instant `json:"tick"`
	DueAt   Instant `json:"due_at"`
}

// Doc is the task's status as StatusDoc writes it.
func (st TaskStatus) Doc(now time.Time) TaskDoc {
	d := TaskDoc{Name: st.Name, Schedule: st.Schedule, Timezone: st.Timezone, NextTick: Instant(st.NextTick),
		Paused: st.Paused, LeaseCount: st.LeaseCount, LastRunCount: st.RunCount, DueCount: st.DueCount, DueComplete: !st.DuePartial,
		EntitiesScanned: st.Scanned, Complete: !st.Partial, Shards: st.Shards, ConfigShards: st.ConfigShards,
		Leases: []LeaseDoc{}, LastRuns: []RunDoc{}, Due: []DueDoc{}, Flags: st.Health.Flags(), NotFiring: st.Health.NotFiring,
		InConfig: st.Unlisted == nil}
	if st.Unlisted != nil {
		d.LastRegistered, d.LastRegisteredBy = Instant(st.Unlisted.Seen), st.Unlisted.By
	}
	if st.Paused || st.Unlisted != nil {
		d.NextTick = Instant{} // it does not tick
	}
	if st.Paused {
		d.Pause = PauseInfoDoc{By: st.Pause.By, At: Instant(st.Pause.At), Reason: st.Pause.Reason, Until: Instant(st.Pause.Until)}
	}
	d.LastTick = TickDoc{State: "none", Replicas: []string{}, Outcomes: map[string]int{}, Skipped: map[string]int{}}
	if st.LastTick != nil {
		d.LastTick = TickDocOf(*st.LastTick)
	}
	for _, h := range st.Leases {
		d.Leases = append(d.Leases, leaseDoc(h, now))
	}
	for _, r := range st.LastRuns {
		rd := RunDoc{Entity: r.Entity, Outcome: string(r.Outcome), Reason: string(r.Reason), Replica: r.Replica,
			Fence: r.Fence, Started: Instant(r.Started), Ended: Instant(r.Ended), LastTick: Instant(r.LastTick), Error: r.Error}
		if r.Outcome == driver.OutcomeUnlocked {
			rd.By = r.By
		}
		if !r.Started.IsZero() && !r.Ended.IsZero() {
			rd.DurationS = Seconds(r.Ended.Sub(r.Started))
		}
		d.LastRuns = append(d.LastRuns, rd)
	}
	for _, e := range st.Due {
		d.Due = append(d.Due, DueDoc{Entity: e.Entity, Reason: string(e.Reason), Attempt: e.Attempt,
			Tick: Instant(e.Tick), DueAt: Instant(e.At)})
	}
	return d
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
}

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

type ActionDoc struct {
	At       Instant  `json:"at"`
	By       string   `json:"by"`
	Action   string   `json:"action"`
	Entities []string `json:"entities"`
	Reason   string   `json:"reason"`
	Until    Instant  `json:"until"`
	Detail   string   `json:"detail"`
}

// SecondsOrZero is d in Seconds, or 0 for none (-1).
func SecondsOrZero(d time.Duration) float64 { return max(d, 0).Seconds() }

func TickDocOf(v history.TickView) TickDoc {
	d := TickDoc{Tick: Instant(v.Tick), State: v.State, Reason: history.Reason(v), Replicas: append([]string{}, v.Replicas()...),
		Entities: v.Entities(), Runs: v.Runs(), Outcomes: map[string]int{}, Skipped: v.Skipped(),
		SourceFailed: v.SourceFailed(), SourceError: v.SourceError(), FirstStartLagS: SecondsOrZero(v.FirstStart()), DurationS: SecondsOrZero(v.LastEnd())}
	for o, n := range v.Outcomes() {
		d.Outcomes[string(o)] = n
	}
	if v.Pause != nil {
		d.PausedBy, d.PauseReason = v.Pause.By, v.Pause.Reason
	}
	return d
}

func ActionDocs(as []lease.Action) []ActionDoc {
	out := make([]ActionDoc, len(as))
	for i, a := range as {
		out[i] = ActionDoc{At: Instant(a.At), By: a.By, Action: string(a.What), Entities: append([]string{}, a.Entities...),
			Reason: a.Reason, Until: Instant(a.Until), Detail: a.Detail}
	}
	return out
}

func (h TaskHistory) Doc() HistoryDoc {
	d := HistoryDoc{Task: h.Task.Name, Flags: h.Health.Flags(), NotFiring: h.Health.NotFiring, Ticks: []TickDoc{},
		Failures: []FailureDoc{}, Actions: ActionDocs(h.Actions)}
	for _, v := range h.Ticks {
		d.Ticks = append(d.Ticks, TickDocOf(v))
	}
	for _, f := range h.Failures {
		d.Failures = append(d.Failures, FailureDoc{Entity: f.Entity, Tick: Instant(f.Tick), Reason: string(f.Reason),
			Fence: f.Fence, Replica: f.Replica, StartedAt: Instant(f.Started), EndedAt: Instant(f.Ended),
			Outcome: string(f.Outcome), Error: f.Error, Output: f.Output})
	}
	return d
}

func leaseDoc(h driver.Held, now time.Time) LeaseDoc {
	return LeaseDoc{Entity: h.Entity, Holder: h.Holder, Since: Instant(h.Since), AgeS: Seconds(now.Sub(h.Since)), Fence: h.Fence,
		TTLLeftS: Seconds(h.TTL), Reason: string(h.Reason), Revoked: h.Revoked}
}
