package lease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// PageQuery asks for one page of a task's entities (the ones the store
// knows: held, or run within StateTTL), for the console: a bounded amount
// of work whatever the number of entities.
type PageQuery struct {
	// Cursor is where the page starts: "" for the first, Page.Next after.
	Cursor string
	// Search keeps the entities whose id begins with it (or, with
	// Substring, contains it); "" keeps every one.
	Search    string
	Substring bool
	// Outcome keeps the entities whose last run had this outcome, or, for
	// "held", those whose lease is held; "" keeps every one.
	Outcome string
	// Size is the most rows a page holds; MaxScan the most entities it
	// looks at (a search may have to look at many for few rows).
	Size, MaxScan int
}

// EntityRow is one entity of a page.
type EntityRow struct {
	Entity string
	Held   *Held    // its lease, if held
	Last   *LastRun // its last finished run, if retained
}

// Page is a page of a task's entities.
type Page struct {
	Rows []EntityRow
	// Next is the cursor of the next page; "" when the walk is over.
	Next string
	// Scanned is about how many entities the page looked at; Capped says
	// it stopped at MaxScan before Size rows were found.
	Scanned int
	Capped  bool
}

// EntityPage reads one page of task's entities, in the store's order (a
// hash's scan order in Redis: HSCAN with MATCH, a page of at most
// q.MaxScan entries looked at).
func (s *Store) EntityPage(ctx context.Context, task string, q PageQuery) (Page, error) {
	q.Size, q.MaxScan = max(q.Size, 1), max(q.MaxScan, q.Size, 1)
	p, err := s.b.entityPage(ctx, task, q)
	if err != nil {
		return Page{}, fmt.Errorf("read entities of %s: %w", task, err)
	}
	return p, nil
}

// matches says whether entity id is kept by q's search.
func (q PageQuery) matches(id string) bool {
	if q.Substring {
		return strings.Contains(id, q.Search)
	}
	return strings.HasPrefix(id, q.Search)
}

// keeps says whether r is kept by q's outcome filter.
func (q PageQuery) keeps(r EntityRow) bool {
	switch q.Outcome {
	case "":
		return true
	case "held":
		return r.Held != nil
	}
	return r.Last != nil && string(r.Last.Outcome) == q.Outcome
}

// pattern is q's search as an HSCAN MATCH pattern over escaped ids: escape
// leaves no glob character, so the id's text is matched as it is. A
// substring match of the escaped form can straddle an escape (%41 for
// "A"): rows are checked again on the decoded id.
func (q PageQuery) pattern() string {
	switch {
	case q.Search == "":
		return ""
	case q.Substring:
		return "*" + escape(q.Search) + "*"
	}
	return escape(q.Search) + "*"
}

// ErrBadCursor is returned for a page cursor that no page gave (Page.Next).
var ErrBadCursor = errors.New("lease: bad cursor")

// entityPage's cursor is "C.K": HSCAN from cursor C, leaving out the first
// K rows it keeps (a small hash comes whole from one HSCAN call, a page may
// end inside a call's answer, and the same cursor gives the same answer
// while the hash keeps its size).
func (b *redisBackend) entityPage(ctx context.Context, task string, q PageQuery) (Page, error) {
	var p Page
	var cursor uint64
	skip := 0
	if q.Cursor != "" {
		if _, err := fmt.Sscanf(q.Cursor, "%d.%d", &cursor, &skip); err != nil || skip < 0 {
			return p, fmt.Errorf("%w %q", ErrBadCursor, q.Cursor)
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
	for {
		kv, next, err := b.c.HScan(ctx, b.k.entities(task), cursor, q.pattern(), count).Result()
		if err != nil {
			return p, err
		}
		p.Scanned += int(count)
		kept := 0
		for i := 0; i+1 < len(kv); i += 2 {
			entity, err := unescape(kv[i])
			e, derr := decodeEntity(kv[i+1])
			if err != nil || derr != nil || !q.matches(entity) {
				continue
			}
			row := rowOf(task, entity, e, now)
			if !q.keeps(row) {
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

func rowOf(task, entity string, e entityValue, now int64) EntityRow {
	r := EntityRow{Entity: entity}
	if h, ok := e.held(task, entity, now); ok {
		r.Held = &h
	}
	if l, ok := e.lastRun(task, entity); ok {
		r.Last = &l
	}
	return r
}

// entityPage walks the entities in id order; the cursor is the last id
// of the page before.
func (b *memBackend) entityPage(_ context.Context, task string, q PageQuery) (Page, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	seen := map[string]bool{}
	var ids []string
	for _, ms := range [][]string{sortedMembers(b.held, task), sortedMembers(b.states, task)} {
		for _, m := range ms {
			if _, e, err := splitMember(m); err == nil && !seen[e] {
				seen[e] = true
				ids = append(ids, e)
			}
		}
	}
	sort.Strings(ids)
	var p Page
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
		if q.matches(id) {
			st := b.oneLocked(task, id, now)
			if row := (EntityRow{Entity: id, Held: st.Held, Last: st.Last}); q.keeps(row) {
				p.Rows = append(p.Rows, row)
			}
		}
	}
	return p, nil
}
