package lease

import (
	"context"
	"fmt"
)

// EntityPage reads one page of task's entities, in the store's order (a
// hash's scan order in Redis: HSCAN with MATCH, a page of at most
// q.MaxScan entries looked at).
func (s *Store) EntityPage(ctx context.Context, task string, q PageQuery) (Page, error) {
	q.Size, q.MaxScan = max(q.Size, 1), max(q.MaxScan, q.Size, 1)
	p, err := s.b.EntityPage(ctx, task, q)
	if err != nil {
		return Page{}, fmt.Errorf("read entities of %s: %w", task, err)
	}
	return p, nil
}
