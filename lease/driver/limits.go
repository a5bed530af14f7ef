package driver

import (
	"context"
	"time"
)

// Limit is a budget every replica shares: at most Concurrency runs at
// once, and run starts at Rate per Per, Burst of them at once. PerEntity
// gives each entity a budget of its own (an API token per shop); else
// every run under the limit shares one.
type Limit struct {
	Name        string
	Concurrency int // 0: no bound
	Rate        int // starts per Per; 0: no bound
	Per         time.Duration
	Burst       int // at least 1
	PerEntity   bool
}

// Interval is the time between two starts at the limit's rate (GCRA's
// emission interval), or 0 for no rate.
func (l Limit) Interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return l.Per / time.Duration(l.Rate)
}

// Limits keeps the limits' shared state: each replica's runs under each
// limit (counted while the replica renews them), the rate's schedule, and
// the budgets an API closed. A limit's keys are in one slot of their own.
type Limits interface {
	// TakeLimit asks for a start under lim for each of asks. Every run that
	// asks waits in line, per budget key, the oldest (Since) first across
	// replicas, tasks and ticks: a start is granted to the runs whose
	// place in the line is within the room the budget has (under the
	// concurrency, every replica's runs counted; at the rate; not closed).
	// The others keep their place (the older Since of their asks) while
	// they ask again within the wait they are told and LimitWaitGrace. A
	// granted start counts as one of holder's runs under its key until
	// SetLimitRuns says otherwise; holder's runs count for ttl from its
	// last call. maxTTL is the quarantine after a data loss.
	TakeLimit(ctx context.Context, lim Limit, holder string, ttl, maxTTL time.Duration, asks []LimitAsk) ([]LimitGrant, error)
	// SetLimitRuns sets holder's runs under lim by key (a key left out has
	// none), counted for ttl, and gives back the rate's starts of the keys
	// of giveBack, one each: starts granted that no run used.
	SetLimitRuns(ctx context.Context, lim Limit, holder string, ttl time.Duration, runs map[string]int, giveBack []string) error
	// CloseLimit closes lim's budget key (as TakeLimit's keys) for d, for
	// why: no start is granted under it until then.
	CloseLimit(ctx context.Context, lim Limit, key string, d time.Duration, why string) error
	// LimitState reads lim's runs by holder and the budgets closed.
	LimitState(ctx context.Context, lim Limit) (LimitState, error)
}

// LimitAsk is one run asking for a start under a limit.
type LimitAsk struct {
	// Key is the budget: Escape(entity) for a limit per entity, else "".
	Key string
	// Waiter is who waits in line (LimitWaiter): one place per task and
	// entity, so a newer tick's run of an entity takes the place of its
	// older one.
	Waiter string
	// Since is when the run was first asked for (its tick for a tick's
	// run); zero for now.
	Since time.Time
}

// LimitWaiter is the place in a limit's line of task's run of entity.
func LimitWaiter(task, entity string) string { return Escape(task) + "/" + Escape(entity) }

// LimitWaitGrace is how long a run keeps its place in a limit's line after
// the wait it was told: one that does not ask again by then (its replica
// stopped, its task was paused or removed) leaves the line, and the runs
// behind it move up. It takes its place back, by its Since, when it asks.
const LimitWaitGrace = 3 * time.Second

// FullPoll is how soon the first run in a full limit's line asks again;
// the runs behind it ask later, a few per run slot at a time, up to
// MaxFullWait.
const (
	FullPoll    = 250 * time.Millisecond
	MaxFullWait = 10 * time.Second
)

// FullWait is how long a run with ahead runs before it in a full limit's
// line (beyond the room) waits before it asks again.
func FullWait(ahead, concurrency int) time.Duration {
	return min(FullPoll+time.Duration(ahead/max(concurrency, 1))*FullPoll, MaxFullWait)
}

// LimitGrant is TakeLimit's answer for one ask.
type LimitGrant struct {
	OK bool
	// Not OK: Why there is no room (LimitFull, LimitRate, LimitClosed,
	// LimitQuarantine), and Wait, how long until there may be (0: not
	// known, for LimitFull).
	Why    string
	Wait   time.Duration
	Reason string // LimitClosed: what closed it
}

// Why a limit has no room.
const (
	LimitFull       = "concurrency"
	LimitRate       = "rate"
	LimitClosed     = "closed"
	LimitQuarantine = "quarantine"
)

// LimitState is what the store holds of a limit.
type LimitState struct {
	// Runs are the runs under the limit by holder, then by key.
	Runs map[string]map[string]int
	// Waiting counts the runs in line; Oldest are the oldest of them
	// (up to MaxOldest), oldest first.
	Waiting int
	Oldest  []LimitWaiting
	// Closed are the budgets closed, by key.
	Closed map[string]LimitClosing
}

// MaxOldest bounds LimitState.Oldest.
const MaxOldest = 256

// LimitWaiting is a run waiting in a limit's line.
type LimitWaiting struct {
	Waiter string // LimitWaiter's
	Since  time.Time
}

// LimitClosing is a budget closed until a time, and why.
type LimitClosing struct {
	Until  time.Time
	Reason string
}
