package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Enqueue stores a durable request for a run of (task, entity) after delay.
// One request per (task, entity) is kept: an earlier pending one covers it.
func (s *Store) Enqueue(ctx context.Context, d driver.Due, delay time.Duration) error {
	_, err := s.EnqueueWaiting(ctx, d, delay)
	if errors.Is(err, driver.ErrWaiting) {
		return nil // covered by the same tick's waiting run
	}
	return err
}

// EnqueueWaiting is Enqueue, and for a tick's run that waits for a limit,
// says which older tick's waiting run of the entity it superseded (zero
// for none): an entity has one waiting run, for its newest tick. It
// returns an error wrapping driver.ErrWaiting when the same tick's run of
// the entity waits already (another replica enqueued it).
func (s *Store) EnqueueWaiting(ctx context.Context, d driver.Due, delay time.Duration) (superseded time.Time, err error) {
	if err := checkRequestIDs(d.Requests); err != nil {
		return time.Time{}, err
	}
	superseded, err = s.enqueueOnce(ctx, d, delay)
	if errors.Is(err, driver.ErrShardsChanged) && d.Claim == "" { // a reshard: named anew
		if err = s.shards.refresh(ctx, d.Task); err == nil {
			superseded, err = s.enqueueOnce(ctx, d, delay)
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("enqueue %s/%s: %w", d.Task, d.Entity, err)
	}
	return superseded, nil
}

// enqueueOnce names d's shard and enqueues it there.
func (s *Store) enqueueOnce(ctx context.Context, d driver.Due, delay time.Duration) (time.Time, error) {
	name, n, err := s.shards.dueName(ctx, d)
	if err != nil {
		return time.Time{}, err
	}
	d.Task, d.Shards = name, n
	superseded, err := s.b.Enqueue(ctx, d, delay)
	s.acks.note(err)
	return superseded, err
}

// TakeDue takes up to limit due requests. Each is hidden from other takers
// for visibility; pass it as Request.From so the release acks it, or Ack it.
// A request whose taker dies comes back after visibility.
func (s *Store) TakeDue(ctx context.Context, limit int, visibility time.Duration) ([]driver.Due, error) {
	ds, err := s.b.Take(ctx, limit, visibility, s.tok.token())
	if err != nil {
		return nil, fmt.Errorf("take due entries: %w", err)
	}
	for i := range ds {
		ds[i].Task, ds[i].Shard = driver.SplitShard(ds[i].Task)
	}
	return ds, nil
}

// Ack removes a taken due request, if it is still the one taken, without a
// run: its requests are answered AnswerDropped.
func (s *Store) Ack(ctx context.Context, d driver.Due) error {
	name, _, err := s.shards.dueName(ctx, d)
	if err == nil {
		task := d.Task
		d.Task = name
		err = s.b.Ack(ctx, d)
		d.Task = task
	}
	if err != nil {
		return fmt.Errorf("ack %s/%s: %w", d.Task, d.Entity, err)
	}
	return nil
}

// DueEntries calls fn for each pending request of task ("" for all tasks):
// earliest first for one task.
func (f Fleet) DueEntries(ctx context.Context, task string, fn func(driver.Due) error) error {
	s := f.s
	return s.shards.eachShard(ctx, task, func(name string) error {
		return s.b.DueEntries(ctx, name, func(d driver.Due) error {
			d.Task, d.Shard = driver.SplitShard(d.Task)
			return fn(d)
		})
	})
}

// DueCount is the number of pending requests.
func (f Fleet) DueCount(ctx context.Context) (int, error) {
	s := f.s
	return s.b.DueCount(ctx)
}
