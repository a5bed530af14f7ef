package driver

import (
	"maps"
	"slices"
	"time"
	"unicode/utf8"
)

// TickPart is one replica's part in one tick of a task.
type TickPart struct {
	Replica string
	// Process tells apart the processes of one replica id that took part
	// in a tick one after the other (a restart under a fixed replica_id):
	// each keeps a part of its own (PartKey). "" for a part of an older
	// tickd.
	Process string
	// Final says that every run this replica started for the tick has
	// ended (or that it started none). A part left not final by a replica
	// that is gone makes its tick incomplete.
	Final   bool
	Written time.Time // when the replica wrote it
	// Entities is how many entities its source listed; Started how many
	// tick runs it started.
	Entities, Started int
	// Outcomes counts the ended runs by outcome; Skipped the entities it
	// did not run, by reason (SkipAlreadyRan…).
	Outcomes map[Outcome]int
	Skipped  map[string]int
	// SourceFailed: the entity source failed (the entities listed until
	// then were run); SourceError is why (its first MaxSourceError bytes:
	// for a command, its exit status and the end of its stderr).
	SourceFailed bool
	SourceError  string
	// Zones are the zones whose entities the tick served, for a task
	// whose entities tick in zones of their own (timezone_from): at most
	// MaxTickZones names. nil for a task in one zone.
	Zones []string
	// FirstStart is how long after the tick its first run started, LastEnd
	// how long after the tick its last run ended; -1 when none did.
	FirstStart, LastEnd time.Duration
}

// The reasons a tick skips an entity, in TickPart.Skipped, that a
// TickRecord counts apart (the scheduler writes the others: busy,
// quarantined, not_acknowledged, error, stopped, paused, superseded).
const (
	SkipAlreadyRan = "already_ran"
	// SkipLimited: a limit had no room; the run was not skipped but
	// waits, as a due run with its tick. The runs still waiting: a part
	// counts the runs its fan-out sent to wait, and, negative, those of the
	// tick that no longer wait (ran or skipped later, on that replica or
	// another); the record's sum is what waits. A run that waited counts
	// in its tick's record when it runs (Started, Outcomes, LastEnd).
	SkipLimited = "limited"
)

// TickRecord is one tick of a task: the parts of the replicas that took
// part in it.
type TickRecord struct {
	Tick  time.Time
	Parts []TickPart
}

// Runs is how many runs the tick started, on all replicas.
func (r TickRecord) Runs() int {
	n := 0
	for _, p := range r.Parts {
		n += p.Started
	}
	return n
}

// Entities is how many entities the tick listed: the most any replica's
// source listed (each reads the whole source).
func (r TickRecord) Entities() int {
	n := 0
	for _, p := range r.Parts {
		n = max(n, p.Entities)
	}
	return n
}

// Outcomes counts the tick's ended runs by outcome.
func (r TickRecord) Outcomes() map[Outcome]int {
	m := map[Outcome]int{}
	for _, p := range r.Parts {
		for o, n := range p.Outcomes {
			m[o] += n
		}
	}
	return m
}

// Skipped counts the entities the tick did not run, by reason. The replicas
// of a tick share its entities out: what one of them counts as already run
// is mostly another's run, and an entity sent entity by entity (not in a
// chunk) may be found busy by each. With several parts, each reason's count
// is the parts' sum cut to what the runs left of the entities listed, and
// already_ran is what is left after the other reasons.
func (r TickRecord) Skipped() map[string]int {
	m := map[string]int{}
	for _, p := range r.Parts {
		for k, n := range p.Skipped {
			m[k] += n
		}
	}
	maps.DeleteFunc(m, func(_ string, n int) bool { return n <= 0 }) // a late part's runs that no longer wait
	if len(r.Parts) > 1 {
		left := max(0, r.Entities()-r.Runs())
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k != SkipAlreadyRan {
				m[k] = min(m[k], left)
				left -= m[k]
			}
		}
		m[SkipAlreadyRan] = left
	}
	maps.DeleteFunc(m, func(_ string, n int) bool { return n <= 0 })
	return m
}

// Waiting is how many of the tick's runs wait for a limit still.
func (r TickRecord) Waiting() int {
	n := 0
	for _, p := range r.Parts {
		n += p.Skipped[SkipLimited]
	}
	return max(n, 0)
}

// SourceFailed says whether a replica's entity source failed.
func (r TickRecord) SourceFailed() bool {
	return slices.ContainsFunc(r.Parts, func(p TickPart) bool { return p.SourceFailed })
}

// SourceError is why a replica's entity source failed (the first replica's
// that says), or "".
func (r TickRecord) SourceError() string {
	for _, p := range r.Parts {
		if p.SourceError != "" {
			return p.SourceError
		}
	}
	return ""
}

// FirstStart is how long after the tick its first run started; -1: none.
func (r TickRecord) FirstStart() time.Duration {
	d := time.Duration(-1)
	for _, p := range r.Parts {
		if p.FirstStart >= 0 && (d < 0 || p.FirstStart < d) {
			d = p.FirstStart
		}
	}
	return d
}

// LastEnd is how long after the tick its last run ended; -1: none.
func (r TickRecord) LastEnd() time.Duration {
	d := time.Duration(-1)
	for _, p := range r.Parts {
		d = max(d, p.LastEnd)
	}
	return d
}

// Final says whether every part is final: all the runs the tick started
// have ended.
func (r TickRecord) Final() bool {
	return !slices.ContainsFunc(r.Parts, func(p TickPart) bool { return !p.Final })
}

// Zones are the zones the tick served, sorted: its parts' (Zones).
func (r TickRecord) Zones() []string {
	var zs []string
	for _, p := range r.Parts {
		zs = append(zs, p.Zones...)
	}
	slices.Sort(zs)
	return slices.Compact(zs)
}

// MaxTickZones bounds the zones a tick part keeps (TickPart.Zones).
const MaxTickZones = 64

// Replicas lists the replicas that took part, in the order they wrote.
func (r TickRecord) Replicas() []string {
	rs := make([]string, 0, len(r.Parts))
	for _, p := range r.Parts {
		if !slices.Contains(rs, p.Replica) { // a replica restarted during the tick: one name
			rs = append(rs, p.Replica)
		}
	}
	return rs
}

// Retention bounds what is kept of a task's history. Every write enforces
// it on what it writes to.
type Retention struct {
	Ticks    int           // tick records kept, the newest
	Age      time.Duration // and none older than this
	Failures int           // failed runs kept, the newest
	Actions  int           // operator actions kept, the newest
}

// TickWrite is one replica's part of one tick, to be written.
type TickWrite struct {
	Task string
	Tick time.Time
	Part TickPart
	Keep Retention
}

// HistoryRead asks for a task's newest Ticks tick records and Actions
// actions.
type HistoryRead struct {
	Task           string
	Ticks, Actions int
}

// Failure is one failed run (outcome failed, timeout or lease_lost).
type Failure struct {
	Task    string
	Entity  string
	Tick    time.Time
	Reason  Reason
	Fence   int64
	Replica string
	Started time.Time
	Ended   time.Time
	Outcome Outcome
	Error   string
	Output  string // the end of the run's output
}

// Failed says whether o is a failure the history keeps.
func Failed(o Outcome) bool {
	return o == OutcomeFailed || o == OutcomeTimeout || o == OutcomeLeaseLost
}

// Action is what an operator did (tickd's operator commands do each).
type Action struct {
	Task     string // "" for the whole prefix (migrate)
	At       time.Time
	By       string
	What     ActionKind
	Entities []string
	Reason   string
	Until    time.Time // a pause's end; zero: none
	Detail   string
}

// ActionKind is the kind of an operator's action, as the history keeps it.
type ActionKind string

// The actions.
const (
	ActionTrigger ActionKind = "trigger"
	ActionPause   ActionKind = "pause" // or a change of the pause in force (Detail says so)
	ActionResume  ActionKind = "resume"
	ActionUnlock  ActionKind = "unlock"
	ActionForget  ActionKind = "forget"  // a task taken out of the task registry
	ActionMigrate ActionKind = "migrate" // of the whole prefix: Task is ""
	// ActionBackfill: a backfill asked for (tickd backfill), cancelled, or
	// ended (By is then the replica that ran it); Detail says which.
	ActionBackfill ActionKind = "backfill"
)

// TickScan is how many of a task's newest tick records a write looks
// through for its tick: a part for an older tick is too late, and dropped.
const TickScan = 32

// TickAgeDrop is how many records older than the retention's age a write
// drops at most, oldest first (the rest go with later writes, or with the
// list's expiry): a write's cost stays bounded however long the list was
// left alone.
const TickAgeDrop = 16

// CutError cuts a run's error to MaxRunError bytes, at a rune's start.
func CutError(s string) string { return cutAt(s, MaxRunError) }

// MaxSourceError bounds the error of a failed entity source that a tick's
// record keeps.
const MaxSourceError = 1024

// cutAt is s's first max bytes, cut at a rune's start.
func cutAt(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Kept is what a driver keeps of p, and gives back: its times to the
// millisecond, its counts of zero left out, its source's error (cut to
// MaxSourceError) only when the source failed, its zones sorted, once each,
// at most MaxTickZones.
func (p TickPart) Kept() TickPart {
	dur := func(d time.Duration) time.Duration {
		if d < 0 {
			return -1
		}
		return d.Truncate(time.Millisecond)
	}
	p.Written = MSTime(p.Written.UnixMilli())
	p.FirstStart, p.LastEnd = dur(p.FirstStart), dur(p.LastEnd)
	p.Outcomes = maps.Clone(p.Outcomes)
	if p.Outcomes == nil {
		p.Outcomes = map[Outcome]int{}
	}
	maps.DeleteFunc(p.Outcomes, func(_ Outcome, n int) bool { return n == 0 })
	p.Skipped = maps.Clone(p.Skipped)
	if p.Skipped == nil {
		p.Skipped = map[string]int{}
	}
	maps.DeleteFunc(p.Skipped, func(_ string, n int) bool { return n == 0 })
	p.SourceError = cutAt(p.SourceError, MaxSourceError)
	if p.Zones = slices.DeleteFunc(slices.Clone(p.Zones), func(z string) bool { return z == "" }); len(p.Zones) > 0 {
		p.Zones = slices.Compact(slices.Sorted(slices.Values(p.Zones)))
		p.Zones = p.Zones[:min(len(p.Zones), MaxTickZones)]
	} else {
		p.Zones = nil
	}
	if !p.SourceFailed {
		p.SourceError = ""
	}
	return p
}
