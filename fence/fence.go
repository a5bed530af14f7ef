// Package fence checks a run's fencing token where its data lands, so that
// a run that was frozen past its lease (a GC pause, SIGSTOP, a VM
// migration) and wakes to write late is refused by the data, not only
// stopped by tickd.
//
// tickd gives every run a fence (TICKD_FENCE, tasks.Run.Fence, the HTTP
// action's "fence" and Tickd-Fence header) that grows with every grant of
// its (task, entity), across lease expiry and the loss of Redis's data. A
// guard keeps, per key, the highest fence that wrote, and refuses a write
// whose fence is lower: a newer run has written since. A run writes under
// the same fence as often as it likes.
//
// There is one guard per kind of sink, each usable without Go as well:
//
//   - Postgres: inside the writer's own transaction ([Postgres],
//     [PostgresSchema], the tickd_fence SQL function for psql).
//   - Redis: one script that writes only under the highest fence
//     ([Redis], [RedisScript], redis-cli --eval).
//   - HTTP: [Middleware] refuses a lower fence with 409, for a service that
//     tickd's HTTP actions call; its [Store] is in memory or in Redis.
//
// A key names what the fence guards; [Key] (task/entity) is the one tickd's
// HTTP guard uses and the one to use where one run's writes are guarded.
package fence

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrStale is what every guard's refusal is (errors.Is): a run with a
// higher fence has written under the key since.
var ErrStale = errors.New("fence: stale")

// StaleError is a refused write: its fence and, when the guard could say,
// the highest fence that wrote under its key.
type StaleError struct {
	Key     string
	Fence   int64
	Highest int64 // 0: not known
}

func (e *StaleError) Error() string {
	if e.Highest == 0 {
		return fmt.Sprintf("fence: stale: %d under %q, where a higher fence wrote", e.Fence, e.Key)
	}
	return fmt.Sprintf("fence: stale: %d under %q, where %d wrote", e.Fence, e.Key, e.Highest)
}

// Is makes a *StaleError an ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Key is the key of a (task, entity)'s fence: "task/entity". It is one
// key per pair, never two: a task's name holds no "/". In a shell:
// "$TICKD_TASK/$TICKD_ENTITY".
func Key(task, entity string) string { return task + "/" + entity }

// Parse reads a fence as tickd writes it (TICKD_FENCE, Tickd-Fence): a
// decimal integer of at least 1.
func Parse(s string) (int64, error) {
	f, err := strconv.ParseInt(s, 10, 64)
	if err != nil || f < 1 {
		return 0, fmt.Errorf("fence: %q is not a fence (a decimal integer of at least 1)", s)
	}
	return f, nil
}
