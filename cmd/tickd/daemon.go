package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/lmittmann/tint"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/cmd/tickd/internal/otlp"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/earlysignal"
	"github.com/tickd/tickd/internal/gcpolicy"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/redisconn"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/tasks"
)

// newLogger builds the daemon's logger: tint on a terminal, JSON otherwise.
func newLogger(d config.Daemon, w io.Writer, level *slog.LevelVar) *slog.Logger {
	level.Set(parseLevel(d.LogLevel))
	format := d.LogFormat
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "tint"
			}
		}
	}
	switch format {
	case "tint":
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, ReplaceAttr: logs.TerminalSafe}))
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(logs.NewJSON(w, level))
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	l.UnmarshalText([]byte(s)) //nolint:errcheck // validated with the config
	return l
}

// redisClient builds the client for the config's [redis] table.
func redisClient(cfg *config.Config) (redis.UniversalClient, error) {
	c, err := redisconn.Client(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Path, err)
	}
	return c, nil
}

// stockHandlers are the Go handlers of the stock binary: the demo one. A Go
// program that embeds tickd registers its own handlers in a tasks.Registry
// and passes it to tickd.Open (the root package's ExampleOpen).
func stockHandlers() *tasks.Registry {
	r := &tasks.Registry{}
	r.Register("demo-hello", hello) //nolint:errcheck // the only name registered
	return r
}

func runDaemon(ctx context.Context, args []string, stderr io.Writer) error {
	// Signals are ours before anything else: a SIGTERM during start-up (a
	// rolling restart) must stop tickd cleanly, not kill it with the
	// signal's default action.
	sigs := make(chan os.Signal, 4)
	earlysignal.Hand(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var gc gcpolicy.Policy
	gc.Start(ctx)      //nolint:errcheck // nil
	defer gc.Stop(ctx) //nolint:errcheck // nil
	c := newCmdline("run", "")
	if _, err := c.args(args, 0, 0); err != nil {
		return err
	}
	path := c.config
	watch := newConfigWatch(*path)
	cfg, err := loadServed(*path)
	if err != nil {
		return err
	}
	var level slog.LevelVar
	log := newLogger(cfg.Daemon, stderr, &level)
	redisconn.RouteLogs(log)
	reg := prometheus.NewRegistry()
	b := readBuild()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tickd_build_info",
		Help: "1, labelled with the build of this binary."}, []string{"version", "revision", "go_version"})
	buildInfo.WithLabelValues(b.version, b.revision, b.goVersion).Set(1)
	reg.MustRegister(buildInfo)
	reloads := newReloadMetrics(reg)
	a, err := app.Open(cfg, app.Options{Handlers: stockHandlers(), Logger: log, Registerer: reg, Version: b.version, Clock: newClock(log), Daemon: true,
		Traces: func(cfg *config.Config, replica string, log *slog.Logger) (*telemetry.Tracer, error) {
			return otlp.Open(cfg.Telemetry, replica, b.version, log)
		}})
	if err != nil {
		return err
	}
	store, sch, replica := a.Store, a.Scheduler, a.Replica
	// The parts start in this order and stop in reverse (services).
	ss := &services{log: log}
	defer ss.stopAll()
	if err := ss.start(ctx, "systemd watchdog", watchdog(), shortStop); err != nil {
		return err
	}
	if err := ss.start(ctx, "tracer", tracerService(a.Tracer), shortStop); err != nil {
		return err
	}
	if err := ss.start(ctx, "lease store", store, shortStop); err != nil {
		return err
	}
	if cfg.Daemon.MetricsAddr != "" {
		if err := ss.start(ctx, "metrics server", metricsServer(cfg.Daemon.MetricsAddr, reg, store, log), shortStop); err != nil {
			return err
		}
	}
	var con *webConsole
	if cfg.Web != nil {
		if con, err = newConsole(cfg, store, log); err != nil {
			return err
		}
		if err := ss.start(ctx, "console", con.front, shortStop); err != nil {
			return err
		}
	}
	if err := claimReplica(ctx, ss, cfg, store, replica, sigs, log); errors.Is(err, errStopped) {
		log.Info("signal received during start-up: stopping before any run")
		return nil
	} else if err != nil {
		return err
	}
	// The scheduler's stop waits for the runs up to the shutdown_timeout of
	// the config in force then.
	if err := ss.start(ctx, "scheduler", sch, func() time.Duration { return sch.Config().Daemon.ShutdownTimeout }); err != nil {
		return err
	}
	log.Info("tickd started", "config", cfg.Path, "tasks", len(cfg.Tasks), logs.KeyReplica, replica)
	// READY=1 as soon as tickd runs: it waits for Redis by itself (and
	// /readyz says whether Redis answers), so a wrong password or a Redis
	// down at boot must not hold systemctl start for ever.
	daemon.SdNotify(false, daemon.SdNotifyReady) //nolint:errcheck

	// Whether Redis answers, said once it does (or every 10s until then).
	ss.start(ctx, "redis watch", loop(func(ctx context.Context) { watchRedis(ctx, store, log) }), shortStop) //nolint:errcheck // a loop's start is nil
	watch.on = func() bool { return sch.Config().Daemon.WatchConfig }
	ss.start(ctx, "config watch", loop(watch.run), shortStop) //nolint:errcheck // a loop's start is nil

	reloadNow := func() {
		daemon.SdNotify(false, daemon.SdNotifyReloading) //nolint:errcheck
		reloads.record(reload(sch, con, *path, &level, log))
		daemon.SdNotify(false, daemon.SdNotifyReady) //nolint:errcheck
	}
	for {
		select {
		case <-ctx.Done():
			return shutdown(ss, log, nil)
		case <-watch.changed:
			log.Info("config file changed: reloading (watch_config)", "config", *path)
			reloadNow()
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				watch.look()
				reloadNow()
				continue
			}
			log.Info("signal received: stopping", "signal", sig.String())
			return shutdown(ss, log, sigs)
		}
	}
}

// stopRequested says whether a stopping signal arrived while tickd was
// starting; a SIGHUP then is moot (the config was just read).
func stopRequested(sigs <-chan os.Signal) (os.Signal, bool) {
	for {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				return sig, true
			}
		default:
			return nil, false
		}
	}
}

// reload re-reads the config; a bad one is reported and the old one kept.
func reload(sch *scheduler.Scheduler, con *webConsole, path string, level *slog.LevelVar, log *slog.Logger) error {
	cfg, err := loadServed(path)
	if err == nil {
		err = sch.Reload(cfg)
	}
	if err != nil {
		logReloadFailed(log, err)
		return err
	}
	level.Set(parseLevel(cfg.Daemon.LogLevel))
	if con != nil {
		con.reload(cfg)
	}
	return nil
}

// logReloadFailed says that a SIGHUP's config was refused, on one line.
func logReloadFailed(log *slog.Logger, err error) {
	log.Error("reload failed: the old config keeps running", logs.KeyError, strings.ReplaceAll(err.Error(), "\n", "; "))
}

// reloadMetrics say whether the last SIGHUP's config was taken, as
// Prometheus's own prometheus_config_last_reload_successful does: an alert
// on it catches a bad config that only left a log line.
type reloadMetrics struct {
	ok, at prometheus.Gauge
}

func newReloadMetrics(reg prometheus.Registerer) reloadMetrics {
	m := reloadMetrics{
		ok: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickd_config_last_reload_successful",
			Help: "1 if the last config load (start or SIGHUP) succeeded, 0 if a reload failed and the old config runs on."}),
		at: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickd_config_last_reload_success_timestamp_seconds",
			Help: "When the config in force was loaded."}),
	}
	reg.MustRegister(m.ok, m.at)
	m.record(nil)
	return m
}

func (m reloadMetrics) record(err error) {
	if err != nil {
		m.ok.Set(0)
		return
	}
	m.ok.Set(1)
	m.at.SetToCurrentTime()
}

// shutdown stops the daemon's parts, the scheduler first, gracefully; a
// second signal exits at once.
func shutdown(ss *services, log *slog.Logger, sigs <-chan os.Signal) error {
	daemon.SdNotify(false, daemon.SdNotifyStopping) //nolint:errcheck
	if sigs != nil {
		go func() {
			for sig := range sigs {
				if sig != syscall.SIGHUP {
					log.Warn("second signal: exiting at once", "signal", sig.String())
					os.Exit(1)
				}
			}
		}()
	}
	ss.stopAll()
	log.Info("tickd stopped")
	return nil
}

// watchRedis says, at start, whether the lease store answers: an error
// every 10s until it does, then once that it does.
func watchRedis(ctx context.Context, store *lease.Store, log *slog.Logger) {
	for i := 0; ; i++ {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := store.Ping(pctx)
		cancel()
		if err == nil {
			if i > 0 {
				log.Info("redis reachable")
			}
			return
		}
		if i%10 == 0 {
			log.Error("redis unreachable; no run starts until it answers", logs.KeyError, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// hello is a Go handler that logs one line and is done: the binary
// registers it as "demo-hello", to show the shape of a handler.
func hello(_ context.Context, run tasks.Run) (tasks.Result, error) {
	run.Logger.Info("hello from a Go handler", "entity", run.Entity)
	return tasks.Done, nil
}

// tracerService sends the spans left when it stops: started first, it
// stops last, after the runs' ends. Without tracing, it does nothing.
func tracerService(tr *telemetry.Tracer) service {
	return funcs{start: func(context.Context) error { return nil }, stop: tr.Stop}
}
