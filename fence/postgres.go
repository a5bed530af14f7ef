package fence

import (
	"context"
	"database/sql"
	_ "embed" // the guard's schema
	"errors"
	"fmt"
)

// PostgresSchema creates the guard's table, tickd_fences (the highest
// fence that wrote under each key), and its function for SQL callers,
// tickd_fence(key, fence), which raises SQLSTATE TKD01 on a stale fence.
// It can be applied more than once. It is the file guard.sql beside this
// package, installed by tickd's packages as
// /usr/share/tickd/fence-guard.sql.
//
//go:embed guard.sql
var PostgresSchema string

// PostgresAdvance is the guard's one statement ($1 the key, $2 the fence):
// it returns a row when the fence is at least the highest that wrote under
// the key (and makes it the highest), none when it is stale.
//
// Why it holds under READ COMMITTED: the upsert locks the key's row, and
// its WHERE is checked against the row's latest committed version, after
// waiting for a transaction that holds the lock to end. Two transactions
// of one key are ordered by the row lock: the second sees the first's
// fence. The lock is held to commit, so the writes a transaction makes
// after the guard land before any later fence's.
//
// Under REPEATABLE READ or SERIALIZABLE, a key advanced by a transaction
// that committed after this one's snapshot fails the statement with a
// serialization failure (SQLSTATE 40001): retry the transaction, as under
// those levels always, and the retry is refused as stale.
const PostgresAdvance = `INSERT INTO tickd_fences AS t (key, fence) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, at = now()
WHERE t.fence <= EXCLUDED.fence
RETURNING t.fence`

// Querier is what the Postgres guard needs: a *sql.Tx (the transaction
// whose writes it guards), or a *sql.Conn inside a transaction begun on it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Postgres checks fence under key inside tx, the transaction that is to
// write: it returns a *StaleError (ErrStale) if a higher fence has written
// under key, and otherwise makes fence the highest and holds the key's row
// lock until tx ends, so no later fence's transaction commits in between.
// On a stale fence, roll tx back; on another error, too (the transaction
// is aborted; under REPEATABLE READ, a serialization failure is retried).
//
// Call it before the transaction's writes, or after them: either way
// nothing of a stale run's transaction commits. Before is cheaper.
func Postgres(ctx context.Context, tx Querier, key string, fence int64) error {
	if fence < 1 {
		return fmt.Errorf("fence: %d is not a fence (at least 1)", fence)
	}
	var got int64
	err := tx.QueryRowContext(ctx, PostgresAdvance, key, fence).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		stale := &StaleError{Key: key, Fence: fence}
		tx.QueryRowContext(ctx, "SELECT fence FROM tickd_fences WHERE key = $1", key).Scan(&stale.Highest) //nolint:errcheck // for the message alone
		return stale
	}
	if err != nil {
		return fmt.Errorf("fence: postgres guard for %q: %w", key, err)
	}
	return nil
}
