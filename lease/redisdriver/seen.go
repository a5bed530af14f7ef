package redisdriver

import (
	"context"
	"strings"

	"github.com/tickd/tickd/internal/codec"
	"github.com/tickd/tickd/lease/driver"
)

// noteGrants raises each bucket's seen to the fences granted in it, when
// the grants are trusted (err nil: acknowledged, or none asked for). A
// Redis that later lacks one of them was rolled back past it (lib.lua's
// quarantine, which acquire.lua and epoch.lua pass seen to).
func (b *redisDriver) noteGrants(gs []codec.Group[acquireKey], out []driver.AcquireReply, live []int, err error) {
	if err != nil {
		return
	}
	for _, gr := range gs {
		var top int64
		for _, j := range gr.Idx {
			if r := out[live[j]]; r.Err == nil && r.Status == driver.GrantOK {
				top = max(top, r.Fence)
			}
		}
		for seen := &b.seen[bucketOf(gr.Key.task)]; ; {
			old := seen.Load()
			if top <= old || seen.CompareAndSwap(old, top) {
				break
			}
		}
	}
}

// spreadLoss quarantines every bucket of a server on which an acquire found
// a rollback (res, its answers, marked lossFound): only the buckets with a
// fence it forgot find it, where every bucket finds a restart.
func (b *redisDriver) spreadLoss(ctx context.Context, gs []codec.Group[acquireKey], res []string) {
	var found []int
	for _, gr := range gs {
		if v := res[gr.Idx[0]]; strings.HasSuffix(v, "|"+lossFound) && strings.HasPrefix(v, string(driver.GrantQuarantine)+"|") {
			found = append(found, bucketOf(gr.Key.task))
		}
	}
	if len(found) == 0 {
		return
	}
	_, servers := b.lossProbes(ctx)
	b.quarantineLost(ctx, b.maxTTL(), othersOnTheirServers(servers, found)) //nolint:errcheck // the loss watch finds what this misses
}
