// Package tickd is where a Go program that embeds tickd starts: Open builds
// a tickd from a config (config.Parse or config.Load) with the program's
// own Go handlers, logger and Prometheus registry, as the tickd binary
// builds its own (the same replica-id default, lease store wiring,
// metrics and documents); Start runs it, Stop stops it. Status and History
// are the documents tickd status -json and tickd history -json print, and
// Console is the web console, for the program to serve behind its own
// authentication.
//
// A Go handler must honour its ctx: see tasks.Handler, and
// docs/embedding.md for the whole of it.
package tickd

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/tickd/tickd/tickdtype"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/console"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/tasks"
)

// Options are what Open needs beside the config. Every field may be left
// out.
type Options struct {
	// Handlers are the Go handlers of the tasks that name one (handler =).
	Handlers *tasks.Registry
	// Logger gets tickd's lines; nil: slog.Default().
	Logger *slog.Logger
	// Registerer, when set, gets tickd's Prometheus metrics (the tickd_*
	// series the binary serves); Open fails if it has them already. Two
	// tickds share one through prometheus.WrapRegistererWith, a label each.
	Registerer prometheus.Registerer
	// ReplicaID names this process among the replicas that share a Redis.
	// "": the config's replica_id, else $TICKD_REPLICA_ID, else $POD_NAME,
	// else hostname-pid, as for the binary.
	ReplicaID string
	// Version is announced in the replica registry (the console's replicas
	// page): the program's own.
	Version string
	// Clock is the scheduler's and the store's clock; nil: the system's.
	Clock tickdtype.Clock
	// TracerProvider, when set, is where tickd makes its spans (a tick's
	// fan-out, each run's, whose context the handler gets: its own spans
	// join the run's trace). tickd then builds no OpenTelemetry SDK nor
	// exporter and reads no OTEL_* variable; [telemetry] gives run_spans
	// only. Shutting the provider down is the program's. nil: the config's
	// [telemetry] and the OTEL_* variables, as for the binary.
	TracerProvider trace.TracerProvider
	// Redis, when set, is the go-redis client tickd's leases go through:
	// the program's, with its hooks and instrumentation (a *redis.Client,
	// a failover or a Cluster client), which tickd never closes. The
	// config's [redis] then gives the key prefix and replica_acks only
	// (without the table: "tickd" and "auto"); its url, url_file, sentinel
	// and cluster keys are not read. nil: the client the [redis] table
	// describes, or in-process leases without it.
	Redis redis.UniversalClient
	// OnEvent, if set, hears what tickd does (Event): ticks fanned out,
	// runs started and ended. It is called synchronously, from many
	// goroutines: keep it quick (send on a buffered channel, count). A run
	// ends once its lease is released, one after another for a batch: an
	// OnEvent that blocks holds up the others.
	OnEvent func(Event)
}

// ErrRunsGoOn is returned by Stop when runs were still going 2s after they
// were stopped: Go handlers that do not honour their ctx.
var ErrRunsGoOn = scheduler.ErrRunsGoOn

// ErrRestartNeeded is wrapped by Reload's error when the config changed a
// table only a new Open applies ([redis], [telemetry]); the rest of it is
// in force.
var ErrRestartNeeded = app.ErrRestartNeeded

// ErrUnknownTask is wrapped by Status's and History's error for a task that
// neither the config, the task registry nor the history knows.
var ErrUnknownTask = report.ErrUnknownTask

// ErrReplicaInUse is wrapped by Start's error when another live process
// runs under this replica id.
var ErrReplicaInUse = app.ErrReplicaInUse

// Tickd is one embedded tickd: a replica among those sharing the config's
// Redis (or alone, in-process, without a [redis] table).
type Tickd struct{ a *app.App }

// Status is the status document of tickd status -json.
type Status = tickdtype.StatusDoc

// History is a task's history document of tickd history -json.
type History = tickdtype.HistoryDoc

// Open builds cfg's tickd. It starts nothing and connects to nothing yet:
// Start does. [daemon] keys only the binary reads (log_level, log_format,
// metrics_addr, watch_config) are ignored, with a warning.
func Open(cfg *config.Config, opts Options) (*Tickd, error) {
	a, err := app.Open(cfg, app.Options{Handlers: opts.Handlers, Logger: opts.Logger, Registerer: opts.Registerer,
		ReplicaID: opts.ReplicaID, Version: opts.Version, Clock: opts.Clock, TracerProvider: opts.TracerProvider, Redis: opts.Redis,
		Observer: observer(opts.OnEvent)})
	if err != nil {
		return nil, err
	}
	return &Tickd{a}, nil
}

// Start starts the lease store and the scheduler. On a Redis, it first
// makes sure no other live process runs under its replica id (it waits up
// to about 10s for a killed predecessor's announcement to lapse, and fails
// if the other process is alive). ctx bounds the start, not tickd's life.
func (t *Tickd) Start(ctx context.Context) error { return t.a.Start(ctx) }

// Stop stops the ticks, gives the runs going on until ctx is done, then
// stops them and hands each over to another replica, releases every lease
// and stops the store. It returns at most 2s after ctx is done, with
// ErrRunsGoOn if a Go handler did not return by then.
func (t *Tickd) Stop(ctx context.Context) error { return t.a.Stop(ctx) }

// Reload runs cfg from now on, as SIGHUP does for the binary: tasks added,
// removed and changed; a config it cannot run is refused, and the old one
// runs on. A config that changes [redis] or [telemetry] is applied but for
// those, which only a new Open takes: Reload then returns an error that
// wraps ErrRestartNeeded.
func (t *Tickd) Reload(cfg *config.Config) error { return t.a.Reload(cfg) }

// Replica is the replica id this tickd runs under.
func (t *Tickd) Replica() string { return t.a.Replica }

// Status reads the status of every task (task "") or of one: its leases,
// last runs and due entries (at most limit of each), pauses, limits and
// the replicas.
func (t *Tickd) Status(ctx context.Context, task string, limit int) (Status, error) {
	return t.a.Status(ctx, task, limit)
}

// History reads a task's last limit ticks, failures and operator actions,
// newest first, and its health flags.
func (t *Tickd) History(ctx context.Context, task string, limit int) (History, error) {
	return t.a.History(ctx, task, limit)
}

// Console is the web console's pages, served under prefix ("/tickd", say:
// mount it at prefix+"/"). It answers 403 to a request that no
// authentication saw: put the program's own in front, and say who the
// user is with WithUser on each request's context.
func (t *Tickd) Console(prefix string) (http.Handler, error) { return t.a.Console(prefix) }

// Role is what a console user may do.
type Role int

// The console's roles: a Viewer sees every page; an Admin may also pause,
// resume, trigger and unlock.
const (
	Viewer Role = Role(console.Viewer)
	Admin  Role = Role(console.Admin)
)

// User is who the program's own authentication says a console request
// comes from.
type User struct {
	Name string
	Role Role
}

// WithUser returns ctx saying that its request comes from u: the program's
// sign-on, in front of Console, calls it for each request it lets through.
func WithUser(ctx context.Context, u User) context.Context {
	return console.WithUser(ctx, console.User{Name: u.Name, Role: console.Role(u.Role)})
}
