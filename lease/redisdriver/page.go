package redisdriver

import (
	"context"
	"fmt"
	"strings"

	"github.com/tickd/tickd/lease/driver"
)

// EntityPage reads one page of task's entities. Its cursor is "C.K": HSCAN from cursor C, leaving out the first
// K rows it keeps (a small hash comes whole from one HSCAN call, a page may
// end inside a call's answer, and the same cursor gives the same answer
// while the hash keeps its size).
func (b *redisDriver) EntityPage(ctx context.Context, task string, q driver.PageQuery) (driver.Page, error) {
	var p driver.Page
	var cursor uint64
	skip := 0
	if q.Cursor != "" {
		if _, err := fmt.Sscanf(q.Cursor, "%d.%d", &cursor, &skip); err != nil || skip < 0 {
			return p, fmt.Errorf("%w %q", driver.ErrBadCursor, q.Cursor)
		}
	}
	now, err := b.serverMS(ctx)
	if err != nil {
		return p, err
	}
	// A call looks at up to pageSize entries (bounded work; a small hash
	// comes whole, so the same cursor gives the same rows). Like any SCAN,
	// a walk over a hash that grows or shrinks meanwhile may show an entity
	// twice.
	count := int64(min(q.MaxScan, pageSize))
	// An entity its chunk's record holds is found by its index field,
	// indexMark and its field: a search by prefix matches anywhere (the
	// rows are checked on their ids).
	pattern := q.Pattern()
	if pattern != "" && !strings.HasPrefix(pattern, "*") {
		pattern = "*" + pattern
	}
	for {
		kv, next, err := b.c.HScan(ctx, b.k.entities(task), cursor, pattern, count).Result()
		if err != nil {
			return p, err
		}
		p.Scanned += int(count)
		rows, err := b.entitiesOf(ctx, task, kv)
		if err != nil {
			return p, err
		}
		kept := 0
		for _, r := range rows {
			if !q.Matches(r.entity) {
				continue
			}
			row := rowOf(task, r.entity, r.e, now)
			if !q.Keeps(row) {
				continue
			}
			if kept++; kept <= skip {
				continue
			}
			if len(p.Rows) == q.Size {
				p.Next = fmt.Sprintf("%d.%d", cursor, kept-1)
				return p, nil
			}
			p.Rows = append(p.Rows, row)
		}
		skip, cursor = 0, next
		if next == 0 {
			return p, nil
		}
		p.Next = fmt.Sprintf("%d.0", next)
		if len(p.Rows) == q.Size {
			return p, nil
		}
		if p.Scanned >= q.MaxScan {
			p.Capped = true
			return p, nil
		}
	}
}

// rowOf is the row of entity, whose value is e, at now (Unix ms).
func rowOf(task, entity string, e entityValue, now int64) driver.EntityRow {
	r := driver.EntityRow{Entity: entity}
	if h, ok := e.held(task, entity, now); ok {
		r.Held = &h
	}
	if l, ok := e.lastRun(task, entity); ok {
		r.Last = &l
	}
	return r
}
