package tickd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tickd/tickd"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/tasks"
)

// syncBuf is a program's log, written by both instances.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestEmbeddingProgram is a Go service embedding tickd as docs/embedding.md
// says: two instances on one Redis, each with its replica id, the
// service's own logger, its Prometheus registry (a label per instance),
// its Go handler, and the console served by its own HTTP server behind its
// own authentication. Every entity runs at a tick, once; the console
// answers only the service's signed-in users; the metrics and the
// documents say what ran.
func TestEmbeddingProgram(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg, err := config.Parse("service.toml", fmt.Appendf(nil, `
[redis]
url = "redis://%s/0"
key_prefix = "service"

[[tasks]]
name = "sync-users"
every = "1s"
lease_ttl = "1500ms"
handler = "sync-user"
entities = ["u1", "u2", "u3", "u4", "u5", "u6"]
`, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	ran := map[string]int{} // entity@tick: runs
	handlers := &tasks.Registry{}
	handlers.Register("sync-user", func(ctx context.Context, r tasks.Run) (tasks.Result, error) { //nolint:errcheck // one name
		mu.Lock()
		ran[r.Entity+"@"+r.Tick.Format(time.RFC3339)]++
		mu.Unlock()
		return tasks.Done, nil
	})
	var instances []*tickd.Tickd
	for _, id := range []string{"svc-a", "svc-b"} {
		td, err := tickd.Open(cfg, tickd.Options{Handlers: handlers, ReplicaID: id, Logger: log.With("instance", id),
			Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"instance": id}, reg), Version: "service 1.2.3"})
		if err != nil {
			t.Fatal(err)
		}
		if err := td.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := td.Stop(ctx); err != nil {
				t.Errorf("stop %s: %v", td.Replica(), err)
			}
		})
		instances = append(instances, td)
	}
	ctx := context.Background()
	expect.WaitFor(t, 30*time.Second, "two complete ticks in the history", func() bool {
		h, err := instances[0].History(ctx, "sync-users", 10)
		n := 0
		for _, tk := range h.Ticks {
			if tk.State == "complete" && tk.Runs == 6 {
				n++
			}
		}
		return err == nil && n >= 2
	})
	mu.Lock()
	for k, n := range ran {
		expect.Equal(t, "runs of "+k, n, 1)
	}
	mu.Unlock()

	checkErrorsToTellApart(t, instances[0], cfg, handlers)

	// The console, behind the service's own sign-on.
	pages, err := instances[1].Console("/ops/tickd")
	if err != nil {
		t.Fatal(err)
	}
	signOn := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Service-User") != "alice" {
				http.Error(w, "sign in", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(tickd.WithUser(r.Context(), tickd.User{Name: "alice", Role: tickd.Viewer})))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/tickd/", signOn(pages))
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	get := func(user string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, web.URL+"/ops/tickd/", nil)
		if user != "" {
			req.Header.Set("X-Service-User", user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, _ := get("")
	expect.Equal(t, "the console without the service's sign-on", code, http.StatusUnauthorized)
	code, body := get("alice")
	expect.Equal(t, "the console signed in", code, http.StatusOK)
	expect.True(t, "the console shows the task", strings.Contains(body, "sync-users"))

	st, err := instances[0].Status(ctx, "sync-users", 10)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "replicas in the status", len(st.Replicas), 2)
	for _, r := range st.Replicas {
		expect.Equal(t, r.ID+"'s version", r.Version, "service 1.2.3")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, f := range families {
		if f.GetName() == "tickd_runs_total" {
			runs = len(f.GetMetric())
		}
	}
	expect.True(t, fmt.Sprintf("tickd_runs_total series (an instance label each): %d", runs), runs >= 1)
	expect.True(t, "the service's logger has tickd's lines", strings.Contains(logs.String(), `"instance":"svc-a"`))
}

// TestReloadSaysWhatTakesARestart: a Reload that changes [redis] applies
// the rest (a task added) and says, with ErrRestartNeeded, that the table
// takes a new Open; one that changes tasks alone returns nil.
// checkErrorsToTellApart: the errors an embedder can tell apart, on a
// running td: a task nobody knows, a replica id a live instance (td) holds,
// a missing config.
func checkErrorsToTellApart(t *testing.T, td *tickd.Tickd, cfg *config.Config, handlers *tasks.Registry) {
	t.Helper()
	ctx := context.Background()
	_, err := td.History(ctx, "nope", 1)
	expect.True(t, fmt.Sprintf("an unknown task: %v", err), errors.Is(err, tickd.ErrUnknownTask))
	dup, err := tickd.Open(cfg, tickd.Options{Handlers: handlers, ReplicaID: td.Replica(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = dup.Start(ctx)
	expect.True(t, fmt.Sprintf("a second instance under %s: %v", td.Replica(), err), errors.Is(err, tickd.ErrReplicaInUse) &&
		strings.Contains(fmt.Sprint(err), fmt.Sprintf("replica id %q is in use by a live tickd", td.Replica())))
	_, err = tickd.Open(nil, tickd.Options{})
	expect.True(t, fmt.Sprintf("Open without a config: %v", err), err != nil)
}

func TestReloadSaysWhatTakesARestart(t *testing.T) {
	t.Parallel()
	handlers := &tasks.Registry{}
	handlers.Register("noop", func(context.Context, tasks.Run) (tasks.Result, error) { return tasks.Done, nil }) //nolint:errcheck // one name
	parse := func(s string) *config.Config {
		cfg, err := config.Parse("service.toml", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	task := func(name string) string {
		return fmt.Sprintf("[[tasks]]\nname = %q\nevery = \"1h\"\nhandler = \"noop\"\n", name)
	}
	td, err := tickd.Open(parse(task("a")), tickd.Options{Handlers: handlers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := td.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { td.Stop(context.Background()) }) //nolint:errcheck // nothing runs
	expect.True(t, "a reload of tasks alone", td.Reload(parse(task("a")+task("b"))) == nil)
	err = td.Reload(parse("[redis]\nurl = \"redis://127.0.0.1:1/0\"\n" + task("a") + task("b") + task("c")))
	expect.True(t, fmt.Sprintf("a reload that changes [redis]: %v", err), errors.Is(err, tickd.ErrRestartNeeded) && strings.Contains(fmt.Sprint(err), "[redis]"))
	st, err := td.Status(context.Background(), "", 1)
	expect.True(t, fmt.Sprintf("task c added all the same: %v %+v", err, st), err == nil && len(st.Tasks) == 3)
}

// TestATracerProviderHandedIn: a program hands its own TracerProvider in;
// a handler's span, made with it from the run's context, and tickd's run
// span are in one trace (the tick's), with no OTEL_* variable read: a
// grpc protocol and an endpoint nobody listens on in the environment (for
// the program's own SDK, say) change nothing, and Open succeeds (it
// failed on the protocol).
func TestATracerProviderHandedIn(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) }) //nolint:errcheck // in memory
	handlers := &tasks.Registry{}
	handlers.Register("work", func(ctx context.Context, r tasks.Run) (tasks.Result, error) { //nolint:errcheck // one name
		_, span := tp.Tracer("service").Start(ctx, "handler work")
		span.End()
		return tasks.Done, nil
	})
	cfg, err := config.Parse("service.toml", []byte("[[tasks]]\nname = \"sync\"\nevery = \"1s\"\nhandler = \"work\"\nentities = [\"u1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	td, err := tickd.Open(cfg, tickd.Options{Handlers: handlers, Logger: slog.New(slog.DiscardHandler), TracerProvider: tp})
	if err != nil {
		t.Fatalf("Open with a provider handed in and OTEL_EXPORTER_OTLP_PROTOCOL=grpc: %v", err)
	}
	if err := td.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { td.Stop(context.Background()) }) //nolint:errcheck // nothing runs long
	// A span is exported when it ends: the tick's fan-out may end after
	// its run did, so the three are waited for together.
	var handler, run, tick tracetest.SpanStub
	expect.WaitFor(t, 10*time.Second, "a handler's span, tickd's run span and its tick's", func() bool {
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "handler work":
				handler = s
			case "run sync":
				run = s
			}
		}
		for _, s := range exp.GetSpans() {
			if s.Name == "tick sync" && s.SpanContext.TraceID() == run.SpanContext.TraceID() {
				tick = s
			}
		}
		return handler.Name != "" && run.Name != "" && tick.Name != "" && handler.Parent.SpanID() == run.SpanContext.SpanID()
	})
	expect.Equal(t, "one trace", handler.SpanContext.TraceID(), run.SpanContext.TraceID())
	expect.True(t, "the run's parent is its tick's fan-out, in the tick's trace", run.Parent.SpanID() == tick.SpanContext.SpanID())
	// The console says where this tickd's traces go, not where the
	// environment's OTLP endpoint would send another's.
	pages, err := td.Console("/ops")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	pages.ServeHTTP(rec, httptest.NewRequest("GET", "/ops/tasks/sync", nil).WithContext(tickd.WithUser(context.Background(), tickd.User{Name: "v", Role: tickd.Viewer})))
	expect.True(t, "the task page's traces: "+rec.Body.String()[:min(rec.Body.Len(), 200)], strings.Contains(rec.Body.String(), "sent to the program&#39;s TracerProvider") && !strings.Contains(rec.Body.String(), "127.0.0.1:1"))
}

// TestARedisClientHandedIn: a program hands its own go-redis client in
// (with a hook of its own, as instrumentation would add); a config without
// [redis] then keeps its leases in that Redis, under the default prefix,
// through that client (the hook sees tickd's scripts), and Stop leaves the
// client open.
func TestARedisClientHandedIn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tickdtest.InitEpoch(t, srv.Addr, "tickd")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	var scripts atomic.Int64
	c.AddHook(countScripts{&scripts})
	var ran atomic.Int64
	handlers := &tasks.Registry{}
	handlers.Register("work", func(context.Context, tasks.Run) (tasks.Result, error) { ran.Add(1); return tasks.Done, nil }) //nolint:errcheck // one name
	cfg, err := config.Parse("service.toml", []byte("[[tasks]]\nname = \"sync\"\nevery = \"1s\"\nhandler = \"work\"\nentities = [\"u1\", \"u2\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	td, err := tickd.Open(cfg, tickd.Options{Handlers: handlers, Logger: slog.New(slog.DiscardHandler), Redis: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := td.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 10*time.Second, "two runs", func() bool { return ran.Load() >= 2 })
	if err := td.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect.True(t, "the program's hook saw tickd's scripts", scripts.Load() > 0)
	keys, err := c.Keys(context.Background(), "tickd:*").Result()
	expect.True(t, fmt.Sprintf("the leases are in that Redis, under tickd: %d keys, %v", len(keys), err), err == nil && len(keys) > 0)
	expect.Equal(t, "the client is still the program's, open", c.Ping(context.Background()).Err(), nil)
}

// countScripts is a go-redis hook that counts the scripts sent.
type countScripts struct{ n *atomic.Int64 }

func (countScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h countScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if strings.HasPrefix(cmd.Name(), "eval") {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
