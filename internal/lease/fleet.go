package lease

import "context"

// Fleet is the store's bookkeeping of the fleet, apart from the lease
// protocol (Store: grants, renewals, trust, releases, unlocks, fences,
// quarantine, limit takes): the task registry and the replicas'
// announcements, pauses, the history lists, the status and page reads, the
// shard counts as recorded, and the operator's tools (driver.Admin). It
// shares its Store's driver and state; Store.Fleet gives it.
type Fleet struct{ s *Store }

// Fleet is s's bookkeeping of the fleet.
func (s *Store) Fleet() Fleet { return Fleet{s} }

// Sweep forgets at once the entities neither held nor touched within
// Options.StateTTL; each store also does it by itself every StateTTL/10
// (at most every hour).
func (f Fleet) Sweep(ctx context.Context) error { return f.s.b.Sweep(ctx) }
