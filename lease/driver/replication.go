package driver

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotAcknowledged is matched by an *AckError.
var ErrNotAcknowledged = errors.New("lease: replicas did not acknowledge the write")

// AckError says that fewer replicas than required acknowledged a lease
// write in time: a grant so refused was not trusted (nothing started under
// it), a renewal so refused did not move the trust window.
type AckError struct {
	Want, Got int
	Within    time.Duration
}

func (e *AckError) Error() string {
	return fmt.Sprintf("%v: %d of %d replicas within %v (a replica is down or lagging)", ErrNotAcknowledged, e.Got, e.Want, e.Within)
}

// Is makes errors.Is(err, ErrNotAcknowledged) true.
func (e *AckError) Is(target error) bool { return target == ErrNotAcknowledged }

// Replication is what the primary says of its replicas, and whether a write
// made now is acknowledged as ReplicaAcks requires.
type Replication struct {
	Role   string      // "master", or "slave" when the store reaches a replica
	Online int         // replicas the primary reports online
	Mode   ReplicaAcks // the store's setting
	Want   int         // replicas a write waits for now (0: none)
	Got    int         // replicas that acknowledged a probe write
	Err    error       // the probe's *AckError, or nil when acknowledged
}

// Migrated is what Store.Migrate moved to this layout.
type Migrated struct {
	Tasks int // task hashes moved into their buckets
	Due   int // pending requests moved
	// From is the layout the keys were in ("" when already in this one):
	// a move may change no key (layout 2 to 3 turns on the chunk records).
	From string
}

// Resharded is what a reshard of one task moved.
type Resharded struct {
	Task     string
	From, To int // its shard counts, before and now
	// What moved to another shard: entities' states, queued follow-ups,
	// pending requests.
	Entities, FollowUps, Due int
}
