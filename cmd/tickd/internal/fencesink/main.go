// Command fencesink is a sink the fault suite's runs write to through
// tickd's three fence guards (package fence): each write goes to Postgres
// (fence.Postgres inside its transaction, a row in tickd_writes), to
// Redis (fence.Redis: an RPUSH of the fence onto the key's list) and
// through fence.Middleware (in memory: an entry in the key's list), so
// that the suite can count the writes each accepted out of fence order
// (none, if the guards hold) and the stale runs' writes each refused.
//
//	fencesink -pg DSN -redis ADDR -addr-file FILE

// It listens on loopback, HTTP and a line protocol, and writes their
// addresses to FILE when ready: "http ADDR" and "line ADDR", a line each.
// A line "WRITE FENCE TASK ENTITY" (task and entity percent-encoded)
// writes through the three guards, the middleware called in this process,
// and is answered by a JSON line: {"postgres": …, "redis": …, "http": …},
// each "accepted", "refused" (a stale fence) or "error: …". The line
// protocol spares the worker, which tickd starts a hundred times a
// second in the fault suite, the start-up cost of net/http. GET /http-log
// is the middleware's writes: a JSON object of the accepted fences by
// key, in order. Its client is internal/testkit/sinkclient, which the test worker
// runs.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/fence"
)

// Schema is what the sink writes, beside the guard's own table: the
// writes Postgres accepted, in commit order (a key's row lock orders
// them, and seq is drawn under it).
const Schema = `CREATE TABLE IF NOT EXISTS tickd_writes (
	seq   bigserial PRIMARY KEY,
	key   text NOT NULL,
	fence bigint NOT NULL
)`

// RedisList is the key of the list of fences the Redis guard accepted
// for key; its fence is under RedisFence(key).
func RedisList(key string) string { return "{" + key + "}:writes" }

// RedisFence is the key of key's highest fence in Redis.
func RedisFence(key string) string { return "{" + key + "}:fence" }

type sink struct {
	db      *sql.DB
	rdb     *redis.Client
	guarded http.Handler // the HTTP guard before logged

	mu  sync.Mutex
	log map[string][]int64 // the middleware's accepted writes
}

func main() {
	pg := flag.String("pg", "", "the Postgres DSN")
	addr := flag.String("redis", "", "the Redis address")
	addrFile := flag.String("addr-file", "", "where to write the address it listens on")
	flag.Parse()
	if err := run(*pg, *addr, *addrFile); err != nil {
		fmt.Fprintln(os.Stderr, "fencesink:", err)
		os.Exit(1)
	}
}

func run(pg, addr, addrFile string) error {
	db, err := sql.Open("pgx", pg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, fence.PostgresSchema+";"+Schema); err != nil {
		return err
	}
	s := &sink{db: db, rdb: redis.NewClient(&redis.Options{Addr: addr}), log: map[string][]int64{}}
	s.guarded = fence.Middleware(&fence.Memory{}, http.HandlerFunc(s.logged))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /http-log", s.httpLog)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	lines, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go s.serveLines(lines)
	addrs := fmt.Sprintf("http %s\nline %s\n", l.Addr(), lines.Addr())
	if err := os.WriteFile(addrFile+".tmp", []byte(addrs), 0o644); err != nil {
		return err
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(l)
}

// serveLines answers the line protocol's connections.
func (s *sink) serveLines(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go s.line(c)
	}
}

// line answers one connection's WRITE lines.
func (s *sink) line(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		var f int64
		var task, entity string
		out := map[string]string{}
		if _, err := fmt.Sscanf(line, "WRITE %d %s %s", &f, &task, &entity); err != nil {
			out["sink"] = "error: " + err.Error()
		} else {
			task, _ = url.PathUnescape(task)
			entity, _ = url.PathUnescape(entity)
			out = s.write(f, task, entity)
		}
		b, _ := json.Marshal(out)
		c.Write(append(b, '\n')) //nolint:errcheck
	}
}

// write writes a run's write through the three guards.
func (s *sink) write(f int64, task, entity string) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := fence.Key(task, entity)
	_, redisErr := fence.Redis(ctx, s.rdb, RedisFence(key), f, RedisList(key), "RPUSH", f)
	out := map[string]string{"postgres": outcome(s.writePostgres(ctx, key, f)), "redis": outcome(redisErr)}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	fence.SetHeaders(req.Header, task, entity, f)
	w := httptest.NewRecorder()
	s.guarded.ServeHTTP(w, req)
	switch w.Code {
	case http.StatusOK:
		out["http"] = "accepted"
	case http.StatusConflict:
		out["http"] = "refused"
	default:
		out["http"] = fmt.Sprintf("error: %d %s", w.Code, w.Body)
	}
	return out
}

// writePostgres is a run's transaction: the guard, then its write.
func (s *sink) writePostgres(ctx context.Context, key string, f int64) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after a commit, a no-op
	if err := fence.Postgres(ctx, tx, key, f); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO tickd_writes (key, fence) VALUES ($1, $2)", key, f); err != nil {
		return err
	}
	return tx.Commit()
}

// outcome is how /write says what a guard did.
func outcome(err error) string {
	switch {
	case err == nil:
		return "accepted"
	case errors.Is(err, fence.ErrStale):
		return "refused"
	}
	return "error: " + err.Error()
}

// logged is the middleware's write: it let the request through.
func (s *sink) logged(w http.ResponseWriter, r *http.Request) {
	tok, _ := fence.FromContext(r.Context())
	s.mu.Lock()
	k := fence.Key(tok.Task, tok.Entity)
	s.log[k] = append(s.log[k], tok.Fence)
	s.mu.Unlock()
}

func (s *sink) httpLog(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	json.NewEncoder(w).Encode(s.log) //nolint:errcheck
}
