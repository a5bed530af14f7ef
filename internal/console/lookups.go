package console

import (
	"context"
	"errors"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/report"
)

// lookups reads entities' attributes from their tasks' sources for the
// entity page, within bounds a viewer cannot raise: one source read at a
// time in the console, each answer kept lookupTTL (the page refreshes
// itself every few seconds, and a source of a million lines is read until
// the entity is found), at most maxLookups answers kept; an
// entities_command is never run (report.ErrCommandNotRun).
type lookups struct {
	sem  chan struct{}
	kept chan map[lookupKey]keptLookup // a lock that a waiting request can give up
}

// lookupKey names an answer by the source as the config gives it, whole:
// two endpoints that differ only in their query (which DescribeSource
// hides) are two sources.
type lookupKey struct{ task, file, url, format, id string }

type keptLookup struct {
	at    time.Time
	found report.Found
}

const (
	lookupTTL  = 30 * time.Second
	maxLookups = 1000
)

// errLookupBusy is a lookup's Found.Err when another source read went on
// for as long as the request could wait.
var errLookupBusy = errors.New("another entity's source is being read: the page shows the attributes at a later refresh")

func newLookups() *lookups {
	l := &lookups{sem: make(chan struct{}, 1), kept: make(chan map[lookupKey]keptLookup, 1)}
	l.kept <- map[lookupKey]keptLookup{}
	return l
}

// find is what t's source says of id: kept, or read now.
func (l *lookups) find(ctx context.Context, t *config.Task, id string) report.Found {
	k := lookupKey{t.Name, t.EntitiesFile, t.EntitiesURL, t.EntitiesFormat, id}
	now := time.Now()
	kept := <-l.kept
	v, ok := kept[k]
	l.kept <- kept
	if ok && now.Sub(v.at) < lookupTTL {
		return v.found
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return report.Found{Err: errLookupBusy}
	}
	f := report.LookupEntity(ctx, t, id, false)
	<-l.sem
	kept = <-l.kept
	if len(kept) >= maxLookups {
		clear(kept)
	}
	if ctx.Err() == nil {
		kept[k] = keptLookup{at: time.Now(), found: f}
	}
	l.kept <- kept
	return f
}
