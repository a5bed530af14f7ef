package lease

import (
	"context"
	"fmt"

	"github.com/tickd/tickd/lease/driver"
)

// Unlock revokes the lease of (task, entity), whoever holds it: the
// holder is told to stop (at once when this store holds it, at its next
// renewal otherwise), and the lease stays held, busy for every other run,
// until the holder has released it or its TTL has passed, whichever comes
// first. So an unlock never lets two runs of one entity overlap. With force
// the lease is freed at once and the unlock recorded as the entity's last
// run by who: a holder still running then overlaps the next run. It
// returns what it found and did, or ErrNotHeld.
func (s *Store) Unlock(ctx context.Context, task, entity, by string, force bool) (driver.Unlocked, error) {
	if _, err := s.Fleet().ReadShards(ctx, []string{task}); err != nil { // a reshard may have moved it
		return driver.Unlocked{}, fmt.Errorf("unlock %s/%s: %w", task, entity, err)
	}
	name, _, err := s.shards.shardName(ctx, task, entity, false)
	if err != nil {
		return driver.Unlocked{}, fmt.Errorf("unlock %s/%s: %w", task, entity, err)
	}
	// This store's lease of the entity, if it holds one: the driver's
	// publish may reach revokedHere before the answer comes.
	mine := s.keeper.holding(task, entity, 0)
	u, ok, err := s.b.Unlock(ctx, name, entity, by, force)
	u.Task = taskOf(u.Task)
	if err != nil {
		return driver.Unlocked{}, fmt.Errorf("unlock %s/%s: %w", task, entity, err)
	}
	if !ok {
		return driver.Unlocked{}, driver.ErrNotHeld
	}
	if mine != nil && mine.Fence == u.Fence {
		s.keeper.drop(mine, revocationCause(unlockHow(u.Freed)))
		u.Told = true
	}
	return u, nil
}

// unlockHow is the revocation of an unlock: freed (-force) or not.
func unlockHow(freed bool) driver.Revocation {
	if freed {
		return driver.Freed
	}
	return driver.Revoked
}

// revocationCause is why a revocation stops its holder's run: the lease
// revoked by an unlock, replaced by a newer tick, or freed (unlock -force:
// lost, others may hold it now).
func revocationCause(how driver.Revocation) error {
	switch how {
	case driver.Freed:
		return ErrLost
	case driver.Replaced:
		return ErrReplaced
	}
	return ErrRevoked
}

// revokedHere stops this store's lease that a revocation (an unlock, a
// newer tick's replace) in this process or another revoked (task is the
// driver's name of its shard): its run stops at once, or does not start,
// rather than at the lease's next renewal.
func (k *keeper) revokedHere(task, entity string, fence int64, how driver.Revocation) {
	if l := k.holding(taskOf(task), entity, fence); l != nil {
		k.drop(l, revocationCause(how))
	}
}

// holding returns the lease of (task, entity) with fence (0: any) that
// this store holds, if any.
func (k *keeper) holding(task, entity string, fence int64) *Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	for l := range k.held {
		if (fence == 0 || l.Fence == fence) && l.Task == task && l.Entity == entity {
			return l
		}
	}
	return nil
}
