package lease

import (
	"context"
	"errors"
	"fmt"
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
