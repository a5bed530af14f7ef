// Package app assembles one tickd from a config: the replica id, the lease
// store and its wiring (renewal counts and errors, acknowledgement loss),
// the metrics, the scheduler with its Go handlers, and what reads it (the
// status and history documents, the console). The tickd binary and a
// program embedding tickd (the root package, tickd.Open) both build theirs
// here, so that they behave alike.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/console"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/metrics"
	"github.com/tickd/tickd/internal/pid1"
	"github.com/tickd/tickd/internal/redisconn"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/tasks"
)

// Options are tickd.Options (the root package documents them), and Daemon.
type Options struct {
	Handlers   *tasks.Registry
	Logger     *slog.Logger // nil: slog.Default()
	Registerer prometheus.Registerer
	ReplicaID  string // "": ReplicaID's default
	Version    string
	Clock      driver.Clock // nil: the system's
	Observer   func(scheduler.Event)
	// TracerProvider, when set, is where tickd makes its spans: no SDK,
	// no exporter, no OTEL_* variable read ([telemetry] gives run_spans).
	TracerProvider trace.TracerProvider
	// Traces, when set (the binary's: package otlp) and TracerProvider is
	// not, builds the tracer the config and the environment ask for (nil:
	// none). Without either, nothing is traced: a program hands its own
	// provider in.
	Traces func(cfg *config.Config, replica string, log *slog.Logger) (*telemetry.Tracer, error)
	// Redis, when set, is the client the leases go through (withClient):
	// the program's, which tickd never closes.
	Redis redis.UniversalClient
	// Daemon says that the tickd binary opens it: the [daemon] keys only
	// the binary reads are its own; a program embedding tickd is warned of
	// those it set, which nothing reads.
	Daemon bool
}

// App is one tickd: its parts, built and wired, not started.
type App struct {
	Replica   string
	Log       *slog.Logger
	Store     *lease.Store
	Scheduler *scheduler.Scheduler
	Metrics   *metrics.Collectors   // nil without Options.Registerer
	Tracer    *telemetry.Tracer     // nil: no traces ([telemetry], OTEL_*)
	client    redis.UniversalClient // the program's (Options.Redis), or nil
	announced bool                  // Start claimed the replica id: Stop withdraws it

	config    *config.Config // in force: Open's, then each Reload's
	parts     []Part         // Add's, started in order after the store
	partsUp   int            // how many of parts started
	scheduled bool           // Start started the scheduler

	mu       sync.Mutex         // guards config and consoles
	consoles []*console.Console // Console's: Reload shows them the new config
}

// Open builds cfg's tickd.
func Open(cfg *config.Config, opts Options) (*App, error) {
	if cfg == nil {
		return nil, errors.New("tickd: Open needs a config (config.Load, config.Parse or config.New)")
	}
	a := &App{Log: opts.Logger, Replica: opts.ReplicaID, client: opts.Redis}
	cfg = a.withClient(cfg)
	a.config = cfg
	if a.Log == nil {
		a.Log = slog.Default()
	}
	if a.Replica == "" {
		a.Replica = ReplicaID(cfg.Daemon)
	}
	if !opts.Daemon {
		if keys := daemonOnly(cfg.Daemon); len(keys) > 0 {
			a.Log.Warn("the config sets [daemon] keys only the tickd binary reads: a program embedding tickd ignores them", "keys", keys, "config", cfg.Path)
		}
	}
	if opts.Clock == nil {
		opts.Clock = lease.SystemClock{}
	}
	if opts.Registerer != nil {
		var err error
		if a.Metrics, err = metrics.New(opts.Registerer); err != nil {
			return nil, err
		}
	}
	// The libraries' own lines go to the log too (go-redis's, the
	// OpenTelemetry SDK's, from before it reads its variables): nothing
	// else writes to stderr.
	redisconn.RouteLogs(a.Log)
	var err error
	switch {
	case opts.TracerProvider != nil:
		a.Tracer = telemetry.FromProvider(opts.TracerProvider, cfg.Telemetry, a.Replica)
	case opts.Traces != nil:
		if a.Tracer, err = opts.Traces(cfg, a.Replica, a.Log); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.TracerProvider != nil:
		a.Log.Info("tracing on: each tick's fan-out and its runs are spans of the program's TracerProvider")
	case a.Tracer != nil:
		a.Log.Info("tracing on: each tick's fan-out and its runs are exported over OTLP/HTTP", "endpoint", a.Tracer.Where())
	}
	if a.Store, err = a.openStore(cfg, opts); err != nil {
		return nil, err
	}
	so := scheduler.Options{Store: a.Store, Logger: a.Log, Registry: opts.Handlers, Clock: opts.Clock, Observer: opts.Observer, Tracer: a.Tracer,
		Version: opts.Version}
	if a.Metrics != nil {
		so.Metrics = a.Metrics
	}
	if a.Scheduler, err = scheduler.New(cfg, so); err != nil {
		a.Store.Stop(context.Background()) //nolint:errcheck // nothing was started
		return nil, err
	}
	return a, nil
}

// daemonOnly are the [daemon] keys d sets that only the binary reads.
func daemonOnly(d config.Daemon) []string {
	def := config.DefaultDaemon()
	var keys []string
	for _, k := range []struct {
		key string
		set bool
	}{
		{"log_level", d.LogLevel != def.LogLevel},
		{"log_format", d.LogFormat != def.LogFormat},
		{"metrics_addr", d.MetricsAddr != def.MetricsAddr},
		{"watch_config", d.WatchConfig != def.WatchConfig},
	} {
		if k.set {
			keys = append(keys, k.key)
		}
	}
	return keys
}

// openStore opens the store the config's [redis] table names (in-process
// without one), with its renewals counted and their failures logged
// (rate-limited), and a loss of the replicas' acknowledgement said.
func (a *App) openStore(cfg *config.Config, opts Options) (*lease.Store, error) {
	log, m := a.Log, a.Metrics
	lo := lease.Options{Replica: a.Replica, Clock: opts.Clock, OnRenew: m.Renewed, Version: opts.Version}
	if cfg.Redis == nil {
		log.Warn("no [redis] table: leases are in-process; replicas would not be coordinated")
	} else {
		limit := logs.NewLimiter(logs.Every)
		lo.OnRenewError = func(err error) {
			m.RedisError("renew")
			limit.Log(log, slog.LevelError, "renew", "lease renewal failed", logs.KeyError, err)
		}
		lo.OnAcks = func(err error) {
			if err != nil {
				log.Error("redis replicas do not acknowledge lease writes: nothing new starts, and runs stop when their leases can no longer be trusted, until they do (replica_acks in docs/operations.md)",
					"replica_acks", cfg.Redis.ReplicaAcks.String(), logs.KeyError, err)
				return
			}
			log.Info("redis replicas acknowledge lease writes again", "replica_acks", cfg.Redis.ReplicaAcks.String())
		}
	}
	s, err := openStoreWith(cfg, lo, a.client)
	if err != nil {
		return nil, err
	}
	switch {
	case a.client != nil:
		log.Info("leases in redis, through the program's client", "key_prefix", cfg.Redis.KeyPrefix, "replica_acks", cfg.Redis.ReplicaAcks.String())
	case cfg.Redis != nil:
		log.Info("leases in redis", "redis", redisconn.Where(cfg.Redis), "key_prefix", cfg.Redis.KeyPrefix, "replica_acks", cfg.Redis.ReplicaAcks.String())
		if redisconn.InsecureTLS(cfg.Redis) {
			log.Warn("redis url has skip_verify=true: the server's TLS certificate is not checked, so anyone on the path can pose as Redis; give the CA instead")
		}
	}
	return s, nil
}

// Start starts the store, then the parts (Add), claims the replica id on a
// Redis (ClaimReplicaID: another live process under it is an error), and
// starts the scheduler. ctx bounds the start: cancelled (a signal during
// start-up), the start stops where it is, and Stop stops what started.
// Without a scheduler (OpenConsole), the parts are all it starts after the
// store.
func (a *App) Start(ctx context.Context) error {
	if err := a.Store.Start(ctx); err != nil {
		return err
	}
	if err := a.startParts(ctx); err != nil {
		return err
	}
	if a.Scheduler == nil {
		return nil
	}
	if a.Config().Redis != nil {
		if err := ClaimReplicaID(ctx, a.Store, a.Replica, a.Log); err != nil {
			return err
		}
		a.announced = true
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if err := a.Scheduler.Start(ctx); err != nil {
		return err
	}
	a.scheduled = true
	return nil
}

// Stop stops what Start started, in reverse: the scheduler (its runs have
// until ctx is done), the replica's announcement, the parts (last added
// first), the store and the tracer, each of the others within 2s.
func (a *App) Stop(ctx context.Context) error {
	var err error
	if a.scheduled {
		err = a.Scheduler.Stop(ctx)
		a.scheduled = false
	}
	if a.announced {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		err = errors.Join(err, a.Store.Fleet().Withdraw(wctx))
		cancel()
		a.announced = false
	}
	err = errors.Join(err, a.stopParts())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	return errors.Join(err, a.Store.Stop(sctx), a.Tracer.Stop(sctx))
}

// Config is the config in force: Open's, then each Reload's.
func (a *App) Config() *config.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.config
}

// Status is the status document (tickd status -json) of every task, or of
// task alone, with at most limit leases, last runs and due entries each.
func (a *App) Status(ctx context.Context, task string, limit int) (report.StatusDoc, error) {
	cfg := a.Config()
	if task != "" {
		if _, err := report.FindTask(ctx, a.Store, cfg, task); err != nil {
			return report.StatusDoc{}, err
		}
	}
	st, err := report.ReadStatus(ctx, a.Store, cfg, task, max(limit, 1), report.StatusScan, "", time.Now())
	if err != nil {
		return report.StatusDoc{}, err
	}
	return st.Doc(), nil
}

// History is task's history document (tickd history -json): at most limit
// ticks, failures and actions, newest first.
func (a *App) History(ctx context.Context, task string, limit int) (report.HistoryDoc, error) {
	t, err := report.FindTask(ctx, a.Store, a.Config(), task)
	if err != nil {
		return report.HistoryDoc{}, err
	}
	h, err := report.ReadHistory(ctx, a.Store, t, max(limit, 1), time.Now())
	if err != nil {
		return report.HistoryDoc{}, err
	}
	return h.Doc(), nil
}

// Console is the console's pages for the config in force, to be served
// under prefix behind the program's own authentication (console.WithUser
// on each request's context says who it is); Reload shows it the new
// config.
func (a *App) Console(prefix string) (*console.Console, error) {
	traces := "" // what this tickd traces, not what the environment would ask of another
	if a.Tracer != nil {
		traces = a.Tracer.Where()
	}
	c, err := console.New(console.Options{Config: a.Config(), Store: a.Store, Logger: a.Log, Prefix: prefix, Traces: &traces})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.consoles = append(a.consoles, c)
	return c, nil
}

// Reload runs cfg from now on (scheduler.Scheduler.Reload), and shows it
// to the consoles and the parts; a config the scheduler refuses changes
// nothing. A changed [redis] or [telemetry] table, which only a restart
// applies, is logged and wrapped as ErrRestartNeeded.
func (a *App) Reload(cfg *config.Config) error {
	cfg = a.withClient(cfg)
	old := a.Config()
	if a.Scheduler != nil {
		if err := a.Scheduler.Reload(cfg); err != nil {
			return err
		}
	}
	a.reloadParts(cfg)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.config = cfg
	for _, c := range a.consoles {
		c.Reload(cfg)
	}
	var tables []string
	if !reflect.DeepEqual(old.Redis, cfg.Redis) {
		tables = append(tables, "[redis]")
	}
	if !reflect.DeepEqual(old.Telemetry, cfg.Telemetry) {
		tables = append(tables, "[telemetry]")
	}
	for _, t := range tables { // said here, once, for a tickd with a scheduler or without (tickd web)
		a.Log.Warn("the " + t + " table changed: restart tickd to use it")
	}
	if len(tables) > 0 {
		return fmt.Errorf("%w: %s changed; everything else is in force", ErrRestartNeeded, strings.Join(tables, " and "))
	}
	return nil
}

// withClient is cfg as tickd runs it when the program handed a Redis
// client in: a config without [redis] gets the default table (key prefix
// "tickd", replica_acks auto), the client saying where Redis is; [redis]'s
// url, url_file, sentinel and cluster keys are not read then.
func (a *App) withClient(cfg *config.Config) *config.Config {
	if a.client == nil || cfg.Redis != nil {
		return cfg
	}
	c := *cfg
	c.Redis = &config.Redis{KeyPrefix: "tickd", ReplicaAcks: driver.AcksAuto}
	return &c
}

// ErrRestartNeeded is Reload's error when the config changed a table that
// only a new start takes ([redis], [telemetry]); the rest was applied.
var ErrRestartNeeded = errors.New("the config changed what only a restart applies")

// ReplicaID is d's replica_id; else TICKD_REPLICA_ID; else POD_NAME (a
// Kubernetes pod's name, by the downward API); else hostname-pid, with a
// random suffix in a container (tickd is PID 1, or the child of its own
// init, internal/pid1): two containers sharing a hostname (--network=host)
// have tickds of the same PID, which would share an id.
func ReplicaID(d config.Daemon) string {
	return ReplicaIDFrom(d, os.Getenv, os.Getpid(), os.Getpid() == 1 || pid1.Child())
}

// ReplicaIDFrom is ReplicaID with the environment, the PID and whether in a
// container given.
func ReplicaIDFrom(d config.Daemon, getenv func(string) string, pid int, container bool) string {
	for _, id := range []string{d.ReplicaID, getenv("TICKD_REPLICA_ID"), getenv("POD_NAME")} {
		if id != "" {
			return id
		}
	}
	h, _ := os.Hostname()
	if container {
		var b [3]byte
		rand.Read(b[:]) //nolint:errcheck // crypto/rand never fails on Linux
		return fmt.Sprintf("%s-%d-%x", h, pid, b)
	}
	return fmt.Sprintf("%s-%d", h, pid)
}
