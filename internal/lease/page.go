package lease

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/tickd/tickd/lease/driver"
)

// EntityPage reads one page of task's entities, in the store's order (a
// hash's scan order in Redis: HSCAN with MATCH, a page of at most
// q.MaxScan entries looked at).
func (f Fleet) EntityPage(ctx context.Context, task string, q driver.PageQuery) (driver.Page, error) {
	s := f.s
	q.Size, q.MaxScan = max(q.Size, 1), max(q.MaxScan, q.Size, 1)
	names, err := s.shards.shardNames(ctx, task)
	if err != nil {
		return driver.Page{}, fmt.Errorf("read entities of %s: %w", task, err)
	}
	if len(names) == 1 {
		p, err := s.b.EntityPage(ctx, task, q)
		if err != nil {
			return driver.Page{}, fmt.Errorf("read entities of %s: %w", task, err)
		}
		return p, nil
	}
	return f.shardedPage(ctx, task, names, q)
}

// shardedPage reads a page of a task of several shards: their entities one
// shard after the other, the cursor "shard/the shard's cursor".
func (f Fleet) shardedPage(ctx context.Context, task string, names []string, q driver.PageQuery) (driver.Page, error) {
	s := f.s
	shard, cur := 0, ""
	if q.Cursor != "" {
		a, b, ok := strings.Cut(q.Cursor, "/")
		n, err := strconv.Atoi(a)
		if !ok || err != nil || n < 0 || n >= len(names) {
			return driver.Page{}, fmt.Errorf("read entities of %s: %w %q", task, driver.ErrBadCursor, q.Cursor)
		}
		shard, cur = n, b
	}
	// Each shard's part of the page looks at its share of MaxScan: a page
	// looks at MaxScan entities at most, whatever the number of shards.
	budget := max(q.MaxScan/len(names), 1)
	var out driver.Page
	for shard < len(names) && len(out.Rows) < q.Size {
		sq := q
		sq.Cursor, sq.Size, sq.MaxScan = cur, q.Size-len(out.Rows), budget
		p, err := s.b.EntityPage(ctx, names[shard], sq)
		if err != nil {
			return driver.Page{}, fmt.Errorf("read entities of %s: %w", task, err)
		}
		out.Rows = append(out.Rows, p.Rows...)
		out.Scanned += p.Scanned
		if cur = p.Next; cur == "" {
			shard++
		}
		if p.Capped {
			out.Capped = true
			break
		}
	}
	for i := range out.Rows {
		if h := out.Rows[i].Held; h != nil {
			h.Task = task
		}
		if l := out.Rows[i].Last; l != nil {
			l.Task = task
		}
	}
	if shard < len(names) {
		out.Next = strconv.Itoa(shard) + "/" + cur
	}
	return out, nil
}
