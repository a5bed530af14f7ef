package lease

import (
	"io"
	"os"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// SystemClock is the Clock everything uses unless told otherwise.
type SystemClock struct{}

// Now is time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// Options configure a Store. The zero value is usable.
type Options struct {
	// Replica is this process's id, recorded as the holder. Defaults to
	// "local".
	Replica string
	// MaxTTL is the longest lease TTL in use: after Redis lost its data,
	// nothing is granted for this long. Defaults to 1m. The quarantine's
	// bound has two doors, one for each moment: this one when the store
	// opens (tickd.Open sets it to the config's longest lease_ttl),
	// and Store.CoverTTL, which only raises it, for a longer TTL later (the
	// scheduler's reload).
	MaxTTL time.Duration
	// StateTTL bounds how long per-entity state (last tick, last run,
	// follow-up flag) is kept after its last write. It must cover catch_up
	// and clock skew. Defaults to 7 days.
	StateTTL time.Duration
	// Clock defaults to the system clock.
	Clock driver.Clock
	// OnRenewError, if set, is called with each failed renewal round (but
	// not for a round the replicas did not acknowledge: see OnAcks).
	OnRenewError func(error)
	// OnRenew, if set, is called after each successful renewal round.
	OnRenew func()
	// OnAcks, if set, is called when lease writes stop being acknowledged
	// by the replicas (with the *driver.AckError) and when they are again (nil).
	OnAcks func(err error)
	// Version is this program's version, announced with its tasks.
	Version string
	// OnSweep, if set, is called after each periodic sweep this store ran
	// (one replica sweeps per interval, whichever claims it first).
	OnSweep func()
	// Closer, if set, is closed by Stop once the store has stopped: the
	// Redis client opened for the store alone (tickd.Open's).
	Closer io.Closer
}

// hostname is this host's name, or "unknown".
func hostname() string {
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "unknown"
}

func (o *Options) fill() {
	if o.Replica == "" {
		o.Replica = "local"
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = time.Minute
	}
	if o.StateTTL <= 0 {
		o.StateTTL = 7 * 24 * time.Hour
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
}
