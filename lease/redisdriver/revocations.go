package redisdriver

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/lease/driver"
)

// subscriber is a client that can subscribe: go-redis's Client,
// ClusterClient and failover client are.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// WatchRevocations calls fn for each lease an unlock revokes or frees, or
// a newer tick replaces, as unlock.lua and acquire.lua publish it (the
// task's driver name, the entity, the fence, and how),
// until ctx ends; go-redis resubscribes after a reconnection. It says
// whether the client can subscribe at all.
func (b *redisDriver) WatchRevocations(ctx context.Context, fn func(task, entity string, fence int64, how driver.Revocation)) bool {
	sc, ok := b.c.(subscriber)
	if !ok {
		return false
	}
	go func() {
		ps := sc.Subscribe(ctx, b.k.revoked())
		defer ps.Close()
		ch := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				if task, entity, fence, how, ok := parseRevocation(m.Payload); ok {
					fn(task, entity, fence, how)
				}
			}
		}
	}()
	return true
}

// parseRevocation reads unlock.lua's "TASK FIELD FENCE KIND" (KIND
// revocationRevoked or revocationFreed) and acquire.lua's (KIND
// revocationReplaced), the task and the field escaped.
func parseRevocation(s string) (task, entity string, fence int64, how driver.Revocation, ok bool) {
	f := strings.Split(s, " ")
	if len(f) != 4 {
		return "", "", 0, 0, false
	}
	task, err1 := driver.Unescape(f[0])
	entity, err2 := driver.Unescape(f[1])
	fence, err3 := strconv.ParseInt(f[2], 10, 64)
	switch f[3] {
	case revocationFreed:
		how = driver.Freed
	case revocationReplaced:
		how = driver.Replaced
	}
	return task, entity, fence, how, err1 == nil && err2 == nil && err3 == nil
}
