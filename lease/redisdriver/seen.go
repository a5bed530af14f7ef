package redisdriver

import (
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
