package report

import (
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/lease/driver"
)

// Seconds is a duration in Seconds, for a key ending in _s.
func Seconds(d time.Duration) float64 { return d.Seconds() }

func ReplicaDocs(rs []driver.Replica) []ReplicaDoc {
	out := make([]ReplicaDoc, len(rs))
	for i, r := range rs {
		out[i] = ReplicaDoc{ID: r.ID, Host: r.Host, Version: r.Version, Tasks: append([]string{}, r.Tasks...),
			Since: Instant(r.Since), LastSeen: Instant(r.Seen), DuplicateOn: r.DuplicateOn}
	}
	return out
}

func ReplicationDocOf(r driver.Replication) ReplicationDoc {
	return ReplicationDoc{Role: r.Role, ReplicasOnline: r.Online, ReplicaAcks: r.Mode.String(), AcksWanted: r.Want,
		AcksNow: r.Got, Acknowledged: r.Err == nil}
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
	d.LastTick = TickDoc{State: "none", Replicas: []string{}, Outcomes: map[string]int{}, Skipped: map[string]int{}, Zones: []string{}}
	if st.LastTick != nil {
		d.LastTick = TickDocOf(*st.LastTick)
	}
	for _, h := range st.Leases {
		d.Leases = append(d.Leases, leaseDoc(h, now))
	}
	for _, r := range st.LastRuns {
		d.LastRuns = append(d.LastRuns, runDoc(r))
	}
	for _, e := range st.Due {
		d.Due = append(d.Due, dueDoc(e))
	}
	return d
}

func runDoc(r driver.LastRun) RunDoc {
	rd := RunDoc{Entity: r.Entity, Outcome: string(r.Outcome), Reason: string(r.Reason), Replica: r.Replica,
		Fence: r.Fence, Started: Instant(r.Started), Ended: Instant(r.Ended), LastTick: Instant(r.LastTick), Error: r.Error}
	if r.Outcome == driver.OutcomeUnlocked {
		rd.By = r.By
	}
	if !r.Started.IsZero() && !r.Ended.IsZero() {
		rd.DurationS = Seconds(r.Ended.Sub(r.Started))
	}
	return rd
}

func dueDoc(e driver.Due) DueDoc {
	return DueDoc{Entity: e.Entity, Reason: string(e.Reason), Attempt: e.Attempt, Tick: Instant(e.Tick), DueAt: Instant(e.At)}
}

// SecondsOrZero is d in Seconds, or 0 for none (-1).
func SecondsOrZero(d time.Duration) float64 { return max(d, 0).Seconds() }

func TickDocOf(v history.TickView) TickDoc {
	d := TickDoc{Tick: Instant(v.Tick), State: v.State, Reason: history.Reason(v), Replicas: append([]string{}, v.Replicas()...),
		Entities: v.Entities(), Runs: v.Runs(), Outcomes: map[string]int{}, Skipped: v.Skipped(),
		SourceFailed: v.SourceFailed(), SourceError: v.SourceError(), FirstStartLagS: SecondsOrZero(v.FirstStart()), DurationS: SecondsOrZero(v.LastEnd()),
		Zones: append([]string{}, v.Zones()...)}
	for o, n := range v.Outcomes() {
		d.Outcomes[string(o)] = n
	}
	if v.Pause != nil {
		d.PausedBy, d.PauseReason = v.Pause.By, v.Pause.Reason
	}
	return d
}

func ActionDocs(as []driver.Action) []ActionDoc {
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
