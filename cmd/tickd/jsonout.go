package main

import (
	"encoding/json"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

// The -json documents follow the -json contract (docs/operations.md, "Commands"): snake_case
// keys at every level, durations as seconds in keys ending in _s, instants
// as RFC 3339 UTC strings or null (never a zero time), empty lists as [].
// A field is never renamed once released. TestJSONSchema checks every
// command's document against these rules.

// instant is a time written as RFC 3339 UTC, or null for the zero time.
type instant time.Time

func (t instant) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(time.Time(t).UTC().Format(time.RFC3339Nano))
}

func (t *instant) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = instant{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	*t = instant(v)
	return err
}

// Time is the instant as a time.Time.
func (t instant) Time() time.Time { return time.Time(t) }

// seconds is a duration in seconds, for a key ending in _s.
func seconds(d time.Duration) float64 { return d.Seconds() }

// statusDoc is `tickd status -json`.
type statusDoc struct {
	Replication replicationDoc `json:"replication"`
	Replicas    []replicaDoc   `json:"replicas"`
	Tasks       []taskDoc      `json:"tasks"`
}

// replicaDoc is a running replica, as it last announced itself.
type replicaDoc struct {
	ID       string   `json:"id"`
	Host     string   `json:"host"`
	Version  string   `json:"version"`
	Tasks    []string `json:"tasks"`
	Since    instant  `json:"since"`
	LastSeen instant  `json:"last_seen"`
}

func replicaDocs(rs []lease.Replica) []replicaDoc {
	out := make([]replicaDoc, len(rs))
	for i, r := range rs {
		out[i] = replicaDoc{ID: r.ID, Host: r.Host, Version: r.Version, Tasks: append([]string{}, r.Tasks...),
			Since: instant(r.Since), LastSeen: instant(r.Seen)}
	}
	return out
}

// replicationDoc is status's view of the Redis replicas: what the primary
// reports, and whether a lease write made now is acknowledged.
type replicationDoc struct {
	Role           string `json:"role"`
	ReplicasOnline int    `json:"replicas_online"`
	ReplicaAcks    string `json:"replica_acks"`
	AcksWanted     int    `json:"acks_wanted"`
	AcksNow        int    `json:"acks_now"`
	Acknowledged   bool   `json:"acknowledged"`
}

func replicationDocOf(r lease.Replication) replicationDoc {
	return replicationDoc{Role: r.Role, ReplicasOnline: r.Online, ReplicaAcks: r.Mode.String(), AcksWanted: r.Want,
		AcksNow: r.Got, Acknowledged: r.Err == nil}
}

type taskDoc struct {
	Name         string       `json:"name"`
	Schedule     string       `json:"schedule"`
	Timezone     string       `json:"timezone"`
	NextTick     instant      `json:"next_tick"`
	Paused       bool         `json:"paused"`
	Pause        pauseInfoDoc `json:"pause"`       // empty, with null instants, when not paused
	Flags        []string     `json:"flags"`       // not_firing, failing, starved: the ones up
	NotFiring    string       `json:"not_firing"`  // why it is not firing; "" when it is
	LastTick     tickDoc      `json:"latest_tick"` // state "none" and tick null before the first
	Leases       []leaseDoc   `json:"leases"`
	LeaseCount   int          `json:"lease_count"`
	LastRuns     []runDoc     `json:"last_runs"`
	LastRunCount int          `json:"last_run_count"`
	Due          []dueDoc     `json:"due"`
	DueCount     int          `json:"due_count"`
}

type leaseDoc struct {
	Entity   string  `json:"entity"`
	Holder   string  `json:"holder"`
	Since    instant `json:"since"`
	AgeS     float64 `json:"age_s"`
	Fence    int64   `json:"fence"`
	TTLLeftS float64 `json:"ttl_left_s"`
	Reason   string  `json:"reason"`
}

type runDoc struct {
	Entity    string  `json:"entity"`
	Outcome   string  `json:"outcome"`
	Reason    string  `json:"reason"`
	Replica   string  `json:"replica"` // the replica that ran it; "" for an unlock
	By        string  `json:"by"`      // who unlocked it; "" for a run
	Fence     int64   `json:"fence"`
	Started   instant `json:"started"`
	Ended     instant `json:"ended"`
	DurationS float64 `json:"duration_s"`
	LastTick  instant `json:"last_tick"`
	Error     string  `json:"error"` // a failed run's error; "" otherwise
}

// pauseInfoDoc is who paused a task, when, why, and until when (null: until
// resumed).
type pauseInfoDoc struct {
	By     string  `json:"by"`
	At     instant `json:"at"`
	Reason string  `json:"reason"`
	Until  instant `json:"until"`
}

type dueDoc struct {
	Entity  string  `json:"entity"`
	Reason  string  `json:"reason"`
	Attempt int     `json:"attempt"`
	Tick    instant `json:"tick"`
	DueAt   instant `json:"due_at"`
}

// doc is a task's status as statusDoc writes it.
func (st taskStatus) doc(now time.Time) taskDoc {
	d := taskDoc{Name: st.Name, Schedule: st.Schedule, Timezone: st.Timezone, NextTick: instant(st.NextTick),
		Paused: st.Paused, LeaseCount: st.LeaseCount, LastRunCount: st.RunCount, DueCount: st.DueCount,
		Leases: []leaseDoc{}, LastRuns: []runDoc{}, Due: []dueDoc{}, Flags: st.Health.Flags(), NotFiring: st.Health.NotFiring}
	if st.Paused {
		d.Pause = pauseInfoDoc{By: st.Pause.By, At: instant(st.Pause.At), Reason: st.Pause.Reason, Until: instant(st.Pause.Until)}
	}
	d.LastTick = tickDoc{State: "none", Replicas: []string{}, Outcomes: map[string]int{}, Skipped: map[string]int{}}
	if st.LastTick != nil {
		d.LastTick = tickDocOf(*st.LastTick)
	}
	for _, h := range st.Leases {
		d.Leases = append(d.Leases, leaseDoc{Entity: h.Entity, Holder: h.Holder, Since: instant(h.Since),
			AgeS: seconds(now.Sub(h.Since)), Fence: h.Fence, TTLLeftS: seconds(h.TTL), Reason: string(h.Reason)})
	}
	for _, r := range st.LastRuns {
		rd := runDoc{Entity: r.Entity, Outcome: string(r.Outcome), Reason: string(r.Reason), Replica: r.Replica,
			Fence: r.Fence, Started: instant(r.Started), Ended: instant(r.Ended), LastTick: instant(r.LastTick), Error: r.Error}
		if r.Outcome == lease.OutcomeUnlocked {
			rd.Replica, rd.By = "", r.Replica
		}
		if !r.Started.IsZero() && !r.Ended.IsZero() {
			rd.DurationS = seconds(r.Ended.Sub(r.Started))
		}
		d.LastRuns = append(d.LastRuns, rd)
	}
	for _, e := range st.Due {
		d.Due = append(d.Due, dueDoc{Entity: e.Entity, Reason: string(e.Reason), Attempt: e.Attempt,
			Tick: instant(e.Tick), DueAt: instant(e.At)})
	}
	return d
}

// unlockDoc is `tickd unlock -json`.
type unlockDoc struct {
	Task   string  `json:"task"`
	Entity string  `json:"entity"`
	Holder string  `json:"holder"`
	Fence  int64   `json:"fence"`
	Since  instant `json:"since"`
	By     string  `json:"by"`
}

// migrateDoc is `tickd migrate -json`: what was moved into the key layout.
type migrateDoc struct {
	Layout int `json:"layout"`
	Tasks  int `json:"tasks"`
	Due    int `json:"due"`
}

// pauseDoc is `tickd pause -json` and `tickd resume -json`.
type pauseDoc struct {
	Task   string  `json:"task"`
	Paused bool    `json:"paused"`
	By     string  `json:"by"`
	Reason string  `json:"reason"`
	Until  instant `json:"until"` // a pause's end; null: until resumed
}

// triggerDoc is `tickd trigger -json`: what was triggered and, with -wait,
// each outcome (runs is [] without -wait).
type triggerDoc struct {
	Task      string          `json:"task"`
	Triggered int             `json:"triggered"`
	Paused    bool            `json:"paused"` // the runs wait until the task is resumed
	Runs      []triggerRunDoc `json:"runs"`
}

type triggerRunDoc struct {
	Entity  string `json:"entity"`
	Outcome string `json:"outcome"`
	// For an outcome of "pending": where the run was when -timeout passed,
	// "running" (since it started) or "queued" (since it was due), or
	// "unknown"; "" and null otherwise.
	State string  `json:"state"`
	Since instant `json:"since"`
	where string  // the same, for people
}

// checkDoc is `tickd check -json`: each task's next ticks from -from (or
// now), where leases live, what would fail at run time on this host, and
// with -redis whether Redis answers.
type checkDoc struct {
	Tasks    []checkTaskDoc `json:"tasks"`
	Leases   string         `json:"leases"` // "in-process", or "redis " and where
	Redis    string         `json:"redis"`  // "answers" with -redis, else ""
	Warnings []string       `json:"warnings"`
}

type checkTaskDoc struct {
	Name     string         `json:"name"`
	Schedule string         `json:"schedule"`
	Timezone string         `json:"timezone"`
	Source   string         `json:"source"`
	Ticks    []checkTickDoc `json:"ticks"`
}

// checkTickDoc is one tick: the instant, its wall-clock time in the task's
// zone, and how daylight saving shaped it ("" when it did not).
type checkTickDoc struct {
	Tick  instant `json:"tick"`
	Local string  `json:"local_time"`
	DST   string  `json:"dst"`
}

// historyDoc is `tickd history -json`.
type historyDoc struct {
	Task      string       `json:"task"`
	Flags     []string     `json:"flags"`      // not_firing, failing, starved: the ones up
	NotFiring string       `json:"not_firing"` // why it is not firing; "" when it is
	Ticks     []tickDoc    `json:"ticks"`
	Failures  []failureDoc `json:"failures"`
	Actions   []actionDoc  `json:"actions"`
}

// tickDoc is one tick of the history; a missed one has no replicas. The lag
// and duration are 0 when no run started (runs 0).
type tickDoc struct {
	Tick           instant        `json:"tick"`
	State          string         `json:"state"` // complete, running, incomplete, missed
	Replicas       []string       `json:"replicas"`
	Entities       int            `json:"entities"`
	Runs           int            `json:"runs"`
	Outcomes       map[string]int `json:"outcomes"`
	Skipped        map[string]int `json:"skipped"`
	SourceFailed   bool           `json:"source_failed"`
	FirstStartLagS float64        `json:"first_start_lag_s"`
	DurationS      float64        `json:"duration_s"` // from the tick to its last run's end
}

type failureDoc struct {
	Entity    string  `json:"entity"`
	Tick      instant `json:"tick"`
	Reason    string  `json:"reason"`
	Fence     int64   `json:"fence"`
	Replica   string  `json:"replica"`
	StartedAt instant `json:"started_at"`
	EndedAt   instant `json:"ended_at"`
	Outcome   string  `json:"outcome"`
	Error     string  `json:"error"`
	Output    string  `json:"output"`
}

type actionDoc struct {
	At       instant  `json:"at"`
	By       string   `json:"by"`
	Action   string   `json:"action"`
	Entities []string `json:"entities"`
	Reason   string   `json:"reason"`
	Until    instant  `json:"until"`
	Detail   string   `json:"detail"`
}

// secondsOrZero is d in seconds, or 0 for none (-1).
func secondsOrZero(d time.Duration) float64 { return max(d, 0).Seconds() }

func tickDocOf(v scheduler.TickView) tickDoc {
	d := tickDoc{Tick: instant(v.Tick), State: v.State, Replicas: append([]string{}, v.Replicas()...),
		Entities: v.Entities(), Runs: v.Runs(), Outcomes: map[string]int{}, Skipped: v.Skipped(),
		SourceFailed: v.SourceFailed(), FirstStartLagS: secondsOrZero(v.FirstStart()), DurationS: secondsOrZero(v.LastEnd())}
	for o, n := range v.Outcomes() {
		d.Outcomes[string(o)] = n
	}
	return d
}

func actionDocs(as []lease.Action) []actionDoc {
	out := make([]actionDoc, len(as))
	for i, a := range as {
		out[i] = actionDoc{At: instant(a.At), By: a.By, Action: a.What, Entities: append([]string{}, a.Entities...),
			Reason: a.Reason, Until: instant(a.Until), Detail: a.Detail}
	}
	return out
}

func (h taskHistory) doc() historyDoc {
	d := historyDoc{Task: h.Task.Name, Flags: h.Health.Flags(), NotFiring: h.Health.NotFiring, Ticks: []tickDoc{},
		Failures: []failureDoc{}, Actions: actionDocs(h.Actions)}
	for _, v := range h.Ticks {
		d.Ticks = append(d.Ticks, tickDocOf(v))
	}
	for _, f := range h.Failures {
		d.Failures = append(d.Failures, failureDoc{Entity: f.Entity, Tick: instant(f.Tick), Reason: string(f.Reason),
			Fence: f.Fence, Replica: f.Replica, StartedAt: instant(f.Started), EndedAt: instant(f.Ended),
			Outcome: string(f.Outcome), Error: f.Error, Output: f.Output})
	}
	return d
}
