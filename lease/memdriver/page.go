package memdriver

import (
	"context"
	"sort"

	"github.com/tickd/tickd/lease/driver"
)

// EntityPage walks the entities in id order; the cursor is the last id
// of the page before.
func (b *memDriver) EntityPage(_ context.Context, task string, q driver.PageQuery) (driver.Page, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	seen := map[string]bool{}
	var ids []string
	for _, ms := range [][]member{sortedMembers(b.held, task), sortedMembers(b.states, task)} {
		for _, m := range ms {
			if e := m.entity; !seen[e] {
				seen[e] = true
				ids = append(ids, e)
			}
		}
	}
	sort.Strings(ids)
	var p driver.Page
	last := ""
	for _, id := range ids {
		if q.Cursor != "" && id <= q.Cursor {
			continue
		}
		if len(p.Rows) == q.Size {
			p.Next = last
			return p, nil
		}
		if p.Scanned >= q.MaxScan {
			p.Capped, p.Next = true, last
			return p, nil
		}
		p.Scanned++
		last = id
		if q.Matches(id) {
			st := b.oneLocked(task, id, now)
			if row := (driver.EntityRow{Entity: id, Held: st.Held, Last: st.Last}); q.Keeps(row) {
				p.Rows = append(p.Rows, row)
			}
		}
	}
	return p, nil
}
