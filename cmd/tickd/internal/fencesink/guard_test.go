package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tickd/tickd/fence"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/pgtest"
)

// open starts a Postgres with the guard's schema and the sink's table.
func open(t *testing.T) (*pgtest.Server, *sql.DB) {
	t.Helper()
	srv := pgtest.Start(t)
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(fence.PostgresSchema + ";" + fence.PostgresSchema + ";" + Schema); err != nil { // twice: it can be
		t.Fatal(err)
	}
	return srv, db
}

// guarded is a run's transaction at level: the guard, then a row in
// tickd_writes; it returns the guard's error (the transaction is then
// rolled back) or the commit's.
func guarded(ctx context.Context, db *sql.DB, level sql.IsolationLevel, key string, f int64) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	if err := fence.Postgres(ctx, tx, key, f); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO tickd_writes (key, fence) VALUES ($1, $2)", key, f); err != nil {
		return err
	}
	return tx.Commit()
}

// TestPostgresGuardInOrder: a fence at least the highest writes (the same
// one again, too), a lower one is refused with the highest named, and
// nothing of its transaction commits.
func TestPostgresGuardInOrder(t *testing.T) {
	t.Parallel()
	srv, db := open(t)
	ctx := context.Background()
	for _, f := range []int64{5, 7, 7} {
		if err := guarded(ctx, db, sql.LevelReadCommitted, "sync/e1", f); err != nil {
			t.Fatalf("fence %d: %v", f, err)
		}
	}
	err := guarded(ctx, db, sql.LevelReadCommitted, "sync/e1", 6)
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("fence 6 after 7: %v, want a *fence.StaleError", err)
	}
	expect.Equal(t, "the highest it names", stale.Highest, 7)
	expect.Equal(t, "another key's first fence", guarded(ctx, db, sql.LevelReadCommitted, "sync/e2", 1), nil)
	expect.Equal(t, "the writes that committed", srv.Exec(t, "SELECT string_agg(key || '=' || fence, ' ' ORDER BY seq) FROM tickd_writes"),
		"sync/e1=5 sync/e1=7 sync/e1=7 sync/e2=1")
	expect.True(t, "fence 0 is not a fence", fence.Postgres(ctx, db, "sync/e1", 0) != nil)
}

// TestPostgresGuardWaitsForTheHolder: under READ COMMITTED, a transaction
// whose guard runs while another of the same key holds it waits for that
// one to end, then judges its fence against what it committed: the older
// fence, waiting behind the newer, is refused; the newer, behind the
// older, writes after it.
func TestPostgresGuardWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	srv, db := open(t)
	ctx := context.Background()
	for _, c := range []struct {
		key           string
		first, second int64
		want          string
	}{
		{"sync/newer-first", 9, 4, "9"},
		{"sync/older-first", 4, 9, "4 9"},
	} {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		if err := fence.Postgres(ctx, tx, c.key, c.first); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO tickd_writes (key, fence) VALUES ($1, $2)", c.key, c.first); err != nil {
			t.Fatal(err)
		}
		second := make(chan error, 1)
		go func() { second <- guarded(ctx, db, sql.LevelReadCommitted, c.key, c.second) }()
		expect.WaitFor(t, 10*time.Second, "the second transaction to wait for the key's row lock", func() bool {
			return srv.Exec(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") == "1"
		})
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		err = <-second
		expect.Equal(t, c.key+": the second refused", errors.Is(err, fence.ErrStale), c.second < c.first)
		expect.Equal(t, c.key+": the writes", srv.Exec(t, fmt.Sprintf("SELECT string_agg(fence::text, ' ' ORDER BY seq) FROM tickd_writes WHERE key = '%s'", c.key)), c.want)
	}
}

// TestPostgresGuardUnderRepeatableRead: a transaction whose snapshot
// predates a higher fence's commit fails with a serialization failure
// (40001), whatever its fence; retried, a lower fence is refused as
// stale, a higher one writes.
func TestPostgresGuardUnderRepeatableRead(t *testing.T) {
	t.Parallel()
	_, db := open(t)
	ctx := context.Background()
	for _, f := range []int64{4, 12} {
		key := fmt.Sprint("sync/rr-", f)
		if err := guarded(ctx, db, sql.LevelReadCommitted, key, 1); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		var one int
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil { // the snapshot
			t.Fatal(err)
		}
		if err := guarded(ctx, db, sql.LevelReadCommitted, key, 8); err != nil {
			t.Fatal(err)
		}
		err = fence.Postgres(ctx, tx, key, f)
		tx.Rollback() //nolint:errcheck
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
			t.Errorf("fence %d in a snapshot older than 8's commit: %v, want a serialization failure (40001)", f, err)
		}
		err = guarded(ctx, db, sql.LevelRepeatableRead, key, f)
		expect.Equal(t, fmt.Sprintf("fence %d retried: stale", f), errors.Is(err, fence.ErrStale), f < 8)
		if f > 8 {
			expect.Equal(t, "fence 12 retried", err, nil)
		}
	}
}

// TestTwoWritersRace: two writers, each round's two transactions at once
// (the next round when both have ended), their fences interleaved (in one
// round one is higher, in the next the other), each a READ COMMITTED
// transaction through the guard: the writes committed are in fence order,
// and every round's higher fence wrote.
func TestTwoWritersRace(t *testing.T) {
	t.Parallel()
	rounds := 10000
	if testing.Short() {
		rounds = 500
	}
	srv, db := open(t)
	db.SetMaxOpenConns(2)
	ctx := context.Background()
	var start [2]chan int
	var wg, round sync.WaitGroup
	errs := make(chan error, 2*rounds)
	var refused [2]int
	for w := range 2 {
		start[w] = make(chan int)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range start[w] {
				f := int64(10*r + 1 + (r+w)%2) // A's 1, B's 2 in even rounds; the other way in odd ones
				err := guarded(ctx, db, sql.LevelReadCommitted, "sync/race", f)
				if errors.Is(err, fence.ErrStale) {
					refused[w]++
				} else if err != nil {
					errs <- err
				}
				round.Done()
			}
		}()
	}
	for r := range rounds {
		round.Add(2)
		start[0] <- r
		start[1] <- r
		round.Wait()
	}
	close(start[0])
	close(start[1])
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows := strings.Fields(srv.Exec(t, "SELECT fence FROM tickd_writes WHERE key = 'sync/race' ORDER BY seq"))
	outOfOrder, high, highest := 0, int64(0), map[int64]bool{}
	for _, row := range rows {
		var f int64
		fmt.Sscan(row, &f)
		if f < high {
			outOfOrder++
		}
		high = max(high, f)
		highest[f] = true
	}
	missed := 0
	for r := range rounds {
		if !highest[int64(10*r+2)] {
			missed++
		}
	}
	t.Logf("%d rounds: %d writes committed, %d and %d refused, %d out of order", rounds, len(rows), refused[0], refused[1], outOfOrder)
	expect.Equal(t, "writes committed out of fence order", outOfOrder, 0)
	expect.Equal(t, "rounds whose higher fence did not write", missed, 0)
	expect.Equal(t, "writes", len(rows)+refused[0]+refused[1], 2*rounds)
}

// TestPsqlOneLiner: the exec run's one-liner of docs/operations.md: a
// stale fence's psql exits non-zero and its insert is not committed.
func TestPsqlOneLiner(t *testing.T) {
	t.Parallel()
	srv, _ := open(t)
	srv.Exec(t, "CREATE TABLE totals (entity text, total int)")
	psql := pgtest.Psql(t)
	run := func(f string) error {
		cmd := exec.Command("sh", "-c", psql+` -X -q -v ON_ERROR_STOP=1 -d "$DSN" -v key="$TICKD_TASK/$TICKD_ENTITY" -v fence="$TICKD_FENCE" -v total=42 <<'SQL'
BEGIN;
SELECT tickd_fence(:'key', :'fence');
INSERT INTO totals VALUES (:'key', :total);
COMMIT;
SQL`)
		cmd.Env = append(cmd.Environ(), "DSN="+srv.DSN(), "TICKD_TASK=sync", "TICKD_ENTITY=e'1; DROP TABLE totals", "TICKD_FENCE="+f)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	expect.Equal(t, "fence 7", run("7"), nil)
	err := run("6")
	expect.True(t, fmt.Sprintf("fence 6 after 7 fails, saying stale: %v", err), err != nil && strings.Contains(err.Error(), "stale fence"))
	expect.Equal(t, "rows", srv.Exec(t, "SELECT count(*) FROM totals"), "1")
}
