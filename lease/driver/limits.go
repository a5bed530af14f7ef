package driver

import (
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
	// Auto paces starts to a rate learned from the API's answers
	// (Driver.LearnRate), per budget key, at most AutoMax a second (0: no
	// bound), from AutoStart a second before any answer; Rate and Per are
	// then not used, Burst is.
	Auto      bool
	AutoMax   float64
	AutoStart float64
	// Fair serves the line by group (LimitAsk.Group): each group that has
	// runs waiting gets its share of the starts (its weight's), whatever
	// its number of runs, the oldest first inside it. Else the whole line
	// is one group, the oldest first.
	Fair bool
}

// Interval is the time between two starts at the limit's rate (GCRA's
// emission interval), or 0 for no rate.
func (l Limit) Interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return l.Per / time.Duration(l.Rate)
}

// RateSeen is what one answer said of an auto limit's rate: the rate its
// API allows (0: not said), whether it was too many (a 429), and the
// fields that said it.
type RateSeen struct {
	Rate    float64
	TooMany bool
	Source  string
}

// How an auto limit learns from what it is told (Driver.LearnRate): a
// rate said is paced at AutoMargin of it. With none said, a 429 cuts the
// rate to AutoDecrease of it (AutoDecreaseAgain when a cut less than four
// AutoHolds before did not stop them), at most once an AutoHold, and marks
// the knee, the rate it came at. An answer without a 429 raises the rate, at
// most once two AutoHolds, and only while the budget starts runs at its
// rate: a run near the head of the line was refused for the rate in the
// last two AutoHolds, in a call that found the budget's starts had gone at
// the rate until then (its arrival time less than an interval behind).
// Else the rate is not what holds the runs back (runs that come late and
// all at once find the burst unused, and are refused for it), and a rate
// raised then would be spent at once when they come: doubled before any 429 (no
// knee yet), else by AutoRecover of its gap to AutoMargin of the knee, or,
// there, by AutoProbe of the knee. A rate said
// stands for AutoSaidFor, past which the raises resume. A waiting run of
// an auto limit is told to ask again when the rate says if one was said,
// else AutoAhead times sooner (the rate may have risen by then), or, before
// any 429, when the runs ahead may have started were the rate to double
// each second.
const (
	AutoMargin        = 0.95
	AutoDecrease      = 0.85
	AutoDecreaseAgain = 0.7
	AutoRecover       = 0.25
	AutoProbe         = 0.01
	AutoHold          = 500 * time.Millisecond
	AutoSaidFor       = time.Minute
	AutoFloor         = 0.1 // starts a second: the least rate learned
	AutoAhead         = 2
)

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
	// HeadStart places the run in its line (its group's, in a fair limit)
	// as if it had asked that much before Since.
	HeadStart time.Duration
	// Group is the run's group in a fair limit (Limit.Fair), when Grouped:
	// its name ("" for runs whose entity names none) and Weight, its share
	// against the other groups' (at least 1). A run that does not know it
	// (not Grouped: one asked for outside a tick) takes the group its place
	// in the line has, else "" with the weight it has.
	Group   string
	Weight  int
	Grouped bool
}

// FairUnit is a fair line's virtual time for one start of a group of
// weight 1: a group of weight w advances FairUnit/w a start.
const FairUnit = 1_000_000

// FairHead bounds the starts one TakeLimit call grants in a fair line.
const FairHead = 256

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
	// For a fair limit: GroupsWaiting counts the groups with runs waiting,
	// Groups are the first MaxGroups of them in their turns' order, and
	// Starts counts the starts of the last StartsWindow.
	GroupsWaiting int
	Groups        []LimitGroup
	Starts        int
	// For an auto limit: the rate learned for its one budget (key ""),
	// starts a second (0: none yet), and what it was learned from.
	Rate       float64
	RateSource string
}

// LimitGroup is a group of a fair limit's line: its runs waiting, the
// oldest's since, since when it waits, its weight, and its starts of the last StartsWindow.
type LimitGroup struct {
	Name    string
	Waiting int
	Oldest  time.Time
	Since   time.Time // when it began to wait (its runs, without a break)
	Weight  int
	Started int
}

// MaxGroups bounds LimitState.Groups; StartsWindow is the span its starts
// are counted over, in StartsBuckets buckets (the oldest one in part).
const (
	MaxGroups     = 1000
	StartsWindow  = time.Minute
	StartsBuckets = 6
)

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
