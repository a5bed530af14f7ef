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
	// TakeLimit grants a start under lim for each of keys, in order, that
	// has room: under the concurrency (every replica's runs counted), at
	// the rate, not closed. keys are Escape(entity), or "" for a limit not
	// per entity. A granted start counts as one of holder's runs under its
	// key until SetLimitRuns says otherwise; holder's runs count for ttl
	// from its last call. maxTTL is the quarantine after a data loss.
	TakeLimit(ctx context.Context, lim Limit, holder string, ttl, maxTTL time.Duration, keys []string) ([]LimitGrant, error)
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

// LimitGrant is TakeLimit's answer for one key.
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
	// Closed are the budgets closed, by key.
	Closed map[string]LimitClosing
}

// LimitClosing is a budget closed until a time, and why.
type LimitClosing struct {
	Until  time.Time
	Reason string
}
