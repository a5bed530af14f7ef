package fence_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/fence"
	"github.com/tickd/tickd/tasks"
)

// A service that tickd's HTTP action calls refuses a stale run's call.
func ExampleMiddleware() {
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := fence.FromContext(r.Context())
		fmt.Println("writing for", tok.Entity, "under fence", tok.Fence)
	})
	srv := httptest.NewServer(fence.Middleware(&fence.Memory{}, write))
	defer srv.Close()

	for _, f := range []int64{7, 5} { // a newer run, then a stale one that woke late
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		fence.SetHeaders(req.Header, "sync", "shop-7", f)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(f, resp.Status)
	}
	// Output:
	// writing for shop-7 under fence 7
	// 7 200 OK
	// 5 409 Conflict
}

// A Go handler's write to Postgres: the guard, then the write, in one
// transaction. (PostgresSchema is applied once, as a migration.)
func ExamplePostgres() {
	handler := func(ctx context.Context, db *sql.DB, run tasks.Run, total int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		if err := fence.Postgres(ctx, tx, fence.Key(run.Task, run.Entity), run.Fence); err != nil {
			return err // fence.ErrStale: a newer run has written; nothing is
		}
		if _, err := tx.ExecContext(ctx, "UPDATE shops SET total = $1 WHERE id = $2", total, run.Entity); err != nil {
			return err
		}
		return tx.Commit()
	}
	_ = handler
}

// A Go handler's write to Redis, under the guard.
func ExampleRedis() {
	handler := func(ctx context.Context, rdb *redis.Client, run tasks.Run, total int) error {
		key := "{" + fence.Key(run.Task, run.Entity) + "}" // one hash tag: one slot on a Cluster
		_, err := fence.Redis(ctx, rdb, key+":fence", run.Fence, key+":total", "SET", total)
		return err // fence.ErrStale: a newer run has written; this did not
	}
	_ = handler
}
