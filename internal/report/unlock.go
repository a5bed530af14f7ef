package report

import (
	"fmt"
	"time"

	"github.com/tickd/tickd/lease"
)

// UnlockSaid says what an unlock did and how long it takes, in words, for
// tickd unlock and the console: ttl is the task's lease_ttl (its holder
// renews every ttl/3).
func UnlockSaid(u lease.Unlocked, ttl time.Duration) string {
	what := fmt.Sprintf("%s/%s (holder %s, fence %d)", u.Task, u.Entity, u.Holder, u.Fence)
	left := u.TTL.Round(time.Second)
	switch {
	case u.Freed:
		return fmt.Sprintf("released %s at once; the holder's run may still be going until its next renewal (within %s), "+
			"so a new run may overlap it", what, (ttl / 3).Round(time.Millisecond))
	case u.Already:
		return fmt.Sprintf("the lease of %s was already revoked: the entity is free once its holder has released it, "+
			"at the latest in %s (-force frees it now)", what, left)
	case u.Told:
		return fmt.Sprintf("revoked the lease of %s: its run was told to stop at once; the entity is free once it has "+
			"stopped, at the latest in %s", what, left)
	}
	return fmt.Sprintf("revoked the lease of %s: the holder stops its run at its next renewal (within %s); the entity is "+
		"free once it has stopped, at the latest in %s, and nothing else runs on it before", what, (ttl / 3).Round(time.Millisecond), left)
}
