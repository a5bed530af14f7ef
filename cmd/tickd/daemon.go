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
	// What only the binary adds is parts of the one lifecycle an embedding
	// program runs too (app.App): started after the lease store, before the
	// replica id is claimed and the scheduler starts, in this order;
	// stopped after the scheduler, in reverse, before the store and the
	// tracer.
	a.Add(loopPart("systemd watchdog", watchdog))
	if cfg.Daemon.MetricsAddr != "" {
		a.Add(metricsServer(cfg.Daemon.MetricsAddr, reg, a.Store, log))
	}
	if cfg.Web != nil {
		con, err := newConsole(cfg, a.Store, log)
		if err != nil {
			stopApp(a, log)
			return err
		}
		p := servicePart("console", con.front)
		p.Reload = con.reload
		a.Add(p)
	}
	// Whether Redis answers, said once it does (or every 10s until then).
	a.Add(loopPart("redis watch", func(ctx context.Context) { watchRedis(ctx, a.Store, log) }))
	watch.on = func() bool { return a.Config().Daemon.WatchConfig }
	a.Add(loopPart("config watch", watch.run))
	a.Add(app.Part{Name: "log level", Reload: func(cfg *config.Config) { level.Set(parseLevel(cfg.Daemon.LogLevel)) }})
	if err := startUnlessStopped(ctx, a, sigs); errors.Is(err, errStopped) {
		log.Info("signal received during start-up: stopping before any run")
		stopApp(a, log)
		return nil
	} else if err != nil {
		stopApp(a, log)
		return err
	}
	log.Info("tickd started", "config", cfg.Path, "tasks", len(cfg.Tasks), logs.KeyReplica, a.Replica)
	// READY=1 as soon as tickd runs: it waits for Redis by itself (and
	// /readyz says whether Redis answers), so a wrong password or a Redis
	// down at boot must not hold systemctl start for ever.
	daemon.SdNotify(false, daemon.SdNotifyReady) //nolint:errcheck

	reloadNow := func() {
		daemon.SdNotify(false, daemon.SdNotifyReloading) //nolint:errcheck
		reloads.record(reload(a, *path, log))
		daemon.SdNotify(false, daemon.SdNotifyReady) //nolint:errcheck
	}
	for {
		select {
		case <-ctx.Done():
			return shutdown(a, log, nil)
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
			return shutdown(a, log, sigs)
		}
	}
}

// reload re-reads the config and runs it (app.App.Reload: the scheduler,
// then the parts); a bad one is reported and the old one kept. A change
// only a restart applies ([redis], [telemetry]) is no failure: the
// scheduler said so, and the rest is in force.
func reload(a *app.App, path string, log *slog.Logger) error {
	cfg, err := loadServed(path)
	if err == nil {
		err = a.Reload(cfg)
	}
	if errors.Is(err, app.ErrRestartNeeded) {
		return nil
	}
	if err != nil {
		logReloadFailed(log, err)
		return err
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

// shutdown stops tickd gracefully (stopApp); a second signal exits at once.
func shutdown(a *app.App, log *slog.Logger, sigs <-chan os.Signal) error {
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
	stopApp(a, log)
	log.Info("tickd stopped")
	return nil
}

// stopApp stops what started: the scheduler's runs have the shutdown_timeout
// of the config in force; an error is logged.
func stopApp(a *app.App, log *slog.Logger) {
	d := a.Config().Daemon.ShutdownTimeout
	ctx, cancel := context.WithTimeoutCause(context.Background(), d, fmt.Errorf("the scheduler's stop timeout (shutdown_timeout %s) reached", d))
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		log.Warn("stopped with an error", logs.KeyError, err)
	}
}

// watchRedis says, at start, whether the lease store answers: an error
// every 10s until it does, then once that it does.
func watchRedis(ctx context.Context, store *lease.Store, log *slog.Logger) {
	for i := 0; ; i++ {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := store.Fleet().Ping(pctx)
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
