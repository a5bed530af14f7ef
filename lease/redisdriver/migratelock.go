package redisdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// migrateLockTTL is how long a reshard's lock holds without a renewal: a
// reshard cut short (its process killed) keeps another out that long.
const migrateLockTTL = 30 * time.Second

// errMigrating is returned by Reshard while another reshard of the task
// holds its lock.
var errMigrating = errors.New("another tickd migrate of this task is under way")

// migrateLock is a reshard's hold on its task (keys.migrating): a random
// id, renewed every third of its TTL while the move goes on. ctx ends when
// the lock is lost (another took it after it expired) or released.
type migrateLock struct {
	b    *redisDriver
	key  string
	id   string
	ctx  context.Context
	stop context.CancelCauseFunc
	done chan struct{}
}

// errLockLost ends a move whose lock another reshard took.
var errLockLost = errors.New("the migrate's lock expired and another took it: this move stopped; run tickd migrate again once the other is over")

// lockMigrate takes task's lock, or says for how long another holds it.
func (b *redisDriver) lockMigrate(ctx context.Context, task string) (*migrateLock, error) {
	var raw [16]byte
	rand.Read(raw[:]) //nolint:errcheck // never fails (crypto/rand)
	l := &migrateLock{b: b, key: b.k.migrating(task), id: hex.EncodeToString(raw[:]), done: make(chan struct{})}
	ok, err := b.c.SetNX(ctx, l.key, l.id, migrateLockTTL).Result()
	if err != nil {
		return nil, fmt.Errorf("lease: reshard %s: take its lock: %w", task, err)
	}
	if !ok {
		left, _ := b.c.PTTL(ctx, l.key).Result()
		return nil, fmt.Errorf("lease: reshard %s: %w (or one was cut short: its lock expires within %v)", task, errMigrating, left.Round(time.Second))
	}
	l.ctx, l.stop = context.WithCancelCause(ctx)
	go l.keep()
	return l, nil
}

// keep renews the lock until it is released, or ends the move when it is
// lost. A renewal that fails (Redis does not answer) is tried again at the
// next; the lock's TTL leaves two more.
func (l *migrateLock) keep() {
	defer close(l.done)
	t := time.NewTicker(migrateLockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		err := l.whileHeld(l.ctx, func(tx redis.Pipeliner) { tx.PExpire(l.ctx, l.key, migrateLockTTL) })
		if errors.Is(err, errLockLost) {
			l.stop(errLockLost)
			return
		}
	}
}

// whileHeld runs write in a transaction that happens only if the lock is
// still this one's (WATCH, then MULTI/EXEC: the writes must be in the
// lock's slot); errLockLost when it is not.
func (l *migrateLock) whileHeld(ctx context.Context, write func(tx redis.Pipeliner)) error {
	w, ok := l.b.c.(watcher)
	if !ok {
		return fmt.Errorf("lease: a reshard needs a client that can WATCH (*redis.Client or *redis.ClusterClient), not %T", l.b.c)
	}
	err := w.Watch(ctx, func(tx *redis.Tx) error {
		got, err := tx.Get(ctx, l.key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if got != l.id {
			return errLockLost
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error { write(p); return nil })
		return err
	}, l.key)
	if errors.Is(err, redis.TxFailedErr) {
		return errLockLost // the lock changed between the read and the write
	}
	if err == nil {
		return nil
	}
	if cause := context.Cause(l.ctx); errors.Is(cause, errLockLost) {
		return cause
	}
	return err
}

// watcher is a client with optimistic transactions: go-redis's Client and
// ClusterClient.
type watcher interface {
	Watch(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error
}

// release stops the renewals and deletes the lock if it is still this
// one's.
func (l *migrateLock) release() {
	l.stop(nil)
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.whileHeld(ctx, func(tx redis.Pipeliner) { tx.Del(ctx, l.key) }) //nolint:errcheck // expires by itself
}
