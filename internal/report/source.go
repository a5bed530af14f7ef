package report

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
	"github.com/tickd/tickd/tasks"
)

// TriggerIDs are the entities to trigger: those given (checked against
// the task's list unless force), or every entity of the task.
func TriggerIDs(ctx context.Context, t scheduler.Task, given []string, force bool) ([]string, error) {
	ids := given
	if len(ids) == 0 {
		var err error
		if ids, err = allEntities(ctx, t); err != nil {
			return nil, err
		}
	}
	ids = unique(ids)
	for _, id := range ids {
		if err := tasks.CheckID(id); err != nil || id == "" {
			return nil, fmt.Errorf("entity %q: %v", id, err)
		}
	}
	if len(given) > 0 && !force {
		if err := checkListed(ctx, t, ids); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// allEntities reads a task's entity source (a singleton's one entity is its
// name).
func allEntities(ctx context.Context, t scheduler.Task) ([]string, error) {
	var ids []string
	err := t.Source(nil).Each(ctx, func(id string) error { ids = append(ids, id); return nil })
	return ids, err
}

// checkListed refuses ids that the task's entity source does not list: a
// typo would otherwise run a task for an entity that does not exist. A
// static list, a file and a singleton's name are checked; an
// entities_command is not run (it may be slow, or have effects).
func checkListed(ctx context.Context, t scheduler.Task, ids []string) error {
	if t.EntitiesCommand != nil {
		return nil
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	err := t.Source(nil).Each(ctx, func(id string) error {
		delete(want, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the entities of %s: %w", t.Name, err)
	}
	if len(want) == 0 {
		return nil
	}
	var missing []string
	for _, id := range ids {
		if want[id] {
			missing = append(missing, strconv.Quote(id))
		}
	}
	return fmt.Errorf("%s does not list %s (%s): give -force to trigger it anyway", t.Name, strings.Join(missing, ", "), DescribeSource(t))
}

// unique drops repeated ids, keeping the first of each.
func unique(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// DescribeSource says where a task's entities come from, in a few words.
func DescribeSource(t scheduler.Task) string {
	switch {
	case t.Entities != nil:
		return fmt.Sprintf("%d static entities", len(t.Entities))
	case t.EntitiesFile != "":
		return "entities from " + t.EntitiesFile
	case t.EntitiesCommand != nil:
		return fmt.Sprintf("entities from command %q", t.EntitiesCommand[0])
	}
	return "singleton"
}

// maxRecordedIDs is how many of a trigger's entities its action record
// lists.
const maxRecordedIDs = 20

// Trigger enqueues a run of each id of t, each answering the request ids
// reqs (none: nothing waits for the answers), and returns the action to
// record, by by: what `tickd trigger` and the console do alike.
func Trigger(ctx context.Context, store *lease.Store, t *scheduler.Task, ids, reqs []string, by string) (lease.Action, error) {
	for _, id := range ids {
		if err := store.Enqueue(ctx, lease.Due{Task: t.Name, Entity: id, Reason: lease.ReasonTrigger, Requests: reqs}, 0); err != nil {
			return lease.Action{}, err
		}
	}
	a := lease.Action{Task: t.Name, At: time.Now(), By: by, What: "trigger", Entities: ids[:min(len(ids), maxRecordedIDs)]}
	if len(ids) > maxRecordedIDs {
		a.Detail = fmt.Sprintf("%d entities, the first %d listed", len(ids), maxRecordedIDs)
	}
	return a, nil
}

// RecordAction keeps an operator's action in the history of t (of the
// prefix for t nil), under t's retention.
func RecordAction(ctx context.Context, store *lease.Store, t *scheduler.Task, a lease.Action) error {
	keep := lease.DefaultRetention
	if t != nil {
		keep = t.Retention()
	}
	return store.RecordAction(ctx, a, keep)
}
