package scheduler

import (
	"context"
	"slices"

	"github.com/tickd/tickd/internal/registry"
)

// share is a replica's part of a tick of a task of several shards: the
// shards whose number modulo of is rank, rank being its place among the of
// live replicas that run the task (the replica registry's, read when the
// fan-out starts). Each replica sends its own shards' entities first, and
// sets the others' aside; once the source is read, it comes back to them
// (revisit) and sends the chunks nobody took, so that a replica slow or
// gone leaves its part to the others. Replicas that see the registry
// differently for a moment only race for some shards, as they all would
// without shares: a chunk is still taken once, with its leases.
type share struct{ rank, of int }

// mine says whether shard s is in the share.
func (sh share) mine(s int) bool { return sh.of <= 1 || s%sh.of == sh.rank }

// order is the order in which a replica comes back to the shards: its
// own, then the others from a place of its own, so that two replicas done
// with their parts do not race for the same leftovers.
func (sh share) order(n int) []int {
	out := make([]int, 0, n)
	for s := range n {
		if sh.mine(s) {
			out = append(out, s)
		}
	}
	start := sh.rank * n / max(sh.of, 1)
	for k := range n {
		if s := (start + k) % n; !sh.mine(s) {
			out = append(out, s)
		}
	}
	return out
}

// shareOf is this replica's share of a tick of task in n shards: every
// shard when there is one, when it runs the task alone, or when the
// registry cannot be read.
func (s *Scheduler) shareOf(ctx context.Context, task string, n int) share {
	if n <= 1 {
		return share{}
	}
	rs, err := s.store.Fleet().Replicas(ctx)
	if err != nil {
		return share{}
	}
	ids := registry.RunnerIDs(rs, task)
	if !slices.Contains(ids, s.replica) { // not announced yet
		ids = append(ids, s.replica)
	}
	slices.Sort(ids)
	return share{rank: slices.Index(ids, s.replica), of: len(ids)}
}
