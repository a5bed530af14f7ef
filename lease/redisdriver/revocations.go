package redisdriver

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
// whether the client can subscribe at all. It also listens, on a
// subscription of its own (an ACL may refuse that channel alone), for
// add_due's wake-ups of the due polls (due.go's dueIdle).
func (b *redisDriver) WatchRevocations(ctx context.Context, fn func(task, entity string, fence int64, how driver.Revocation)) bool {
	sc, ok := b.c.(subscriber)
	if !ok {
		return false
	}
	go listen(ctx, sc, b.k.revoked(), nil, func(payload string) {
		if task, entity, fence, how, ok := parseRevocation(payload); ok {
			fn(task, entity, fence, how)
		}
	})
	go listen(ctx, sc, b.k.dueWake(), &b.wakes, func(payload string) {
		if bk, delay, ok := parseWake(payload); ok {
			b.wake(bk, delay)
		}
	})
	return true
}

// listen calls fn with each message of channel until ctx ends. With
// heard, it first waits for the subscription's confirmation, and says
// it holds from then on: a Redis that refuses it (an ACL) leaves heard
// false, as does ctx's end.
func listen(ctx context.Context, sc subscriber, channel string, heard *atomic.Bool, fn func(payload string)) {
	ps := sc.Subscribe(ctx, channel)
	defer ps.Close()
	if heard != nil {
		for {
			_, err := ps.Receive(ctx)
			var refused redis.Error
			if err == nil {
				break
			}
			if errors.As(err, &refused) || ctx.Err() != nil {
				return
			}
			select { // Redis unreachable: go-redis dials again at the next Receive
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		heard.Store(true)
		defer heard.Store(false)
	}
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			fn(m.Payload)
		}
	}
}

// parseWake reads add_due's "BUCKET DELAY_MS": an entry of the bucket is
// due in DELAY_MS, before any that was there.
func parseWake(s string) (bk int, delay time.Duration, ok bool) {
	b, d, found := strings.Cut(s, " ")
	bk, err1 := strconv.Atoi(b)
	ms, err2 := strconv.ParseInt(d, 10, 64)
	return bk, time.Duration(max(ms, 0)) * time.Millisecond, found && err1 == nil && err2 == nil
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
