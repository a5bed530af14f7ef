package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tickd/tickd/console"
	"github.com/tickd/tickd/internal/earlysignal"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

// runWeb serves the console alone, from any host that reaches the config's
// Redis, until SIGTERM or SIGINT.
func runWeb(ctx context.Context, args []string, stderr io.Writer) error {
	c := newCmdline("web", "")
	if _, err := c.args(args, 0, 0); err != nil {
		return err
	}
	cfg, err := scheduler.LoadConfig(*c.config)
	if err != nil {
		return err
	}
	if cfg.Web == nil {
		return fmt.Errorf("no [web] table in %s: give at least listen = \"127.0.0.1:8080\"", cfg.Path)
	}
	if cfg.Redis == nil {
		return fmt.Errorf("tickd web needs a [redis] table in %s: without one, leases live inside the daemon's process (set [web] in the daemon's config to serve the console there)", cfg.Path)
	}
	var level slog.LevelVar
	log := newLogger(cfg.Daemon, stderr, &level)
	routeRedisLogs(log)
	store, closeStore, err := cfg.OpenStore(lease.Options{Replica: "web:" + operator()})
	if err != nil {
		return err
	}
	defer closeStore() //nolint:errcheck // it holds no lease
	con, err := console.New(console.Options{Config: cfg, Store: store, Logger: log})
	if err != nil {
		return err
	}
	stop, err := console.Start(con, cfg.Web, log)
	if err != nil {
		return err
	}
	defer stop()
	sigs := make(chan os.Signal, 1)
	earlysignal.Hand(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	select {
	case <-ctx.Done():
	case sig := <-sigs:
		log.Info("signal received: stopping", "signal", sig.String())
	}
	return nil
}
