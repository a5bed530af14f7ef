package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/console"
	"github.com/tickd/tickd/internal/earlysignal"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/redisconn"
)

// runWeb serves the console alone, from any host that reaches the config's
// Redis, until SIGTERM or SIGINT.
func runWeb(ctx context.Context, args []string, stderr io.Writer) error {
	c := newCmdline("web", "")
	if _, err := c.args(args, 0, 0); err != nil {
		return err
	}
	cfg, err := loadServed(*c.config)
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
	redisconn.RouteLogs(log)
	a, err := app.OpenConsole(cfg, lease.Options{Replica: "web:" + operator()}, log)
	if err != nil {
		return err
	}
	con, err := newConsole(cfg, a.Store, log)
	if err != nil {
		stopApp(a, log)
		return err
	}
	p := servicePart("console", con.front)
	p.Reload = con.reload
	a.Add(p)
	defer stopApp(a, log)
	if err := a.Start(ctx); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	earlysignal.Hand(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload(a, *c.config, log) //nolint:errcheck // logged; the old config stays
				continue
			}
			log.Info("signal received: stopping", "signal", sig.String())
			return nil
		}
	}
}

// loadServed reads the config of a process that serves the console (tickd
// run, tickd web) or checks it (tickd check): the file, then its [web]
// users as the console reads them (console.CheckUsers), every mistake said
// by file, line and key.
func loadServed(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if err := console.CheckUsers(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// webConsole is the console tickd run and tickd web serve: the pages, and
// the front that [web] puts before them.
type webConsole struct {
	con   *console.Console
	front *console.Front
}

// newConsole builds cfg's console, which its front serves on [web] listen
// from Start to Stop.
func newConsole(cfg *config.Config, store *lease.Store, log *slog.Logger) (*webConsole, error) {
	con, err := console.New(console.Options{Config: cfg, Store: store, Logger: log})
	if err != nil {
		return nil, err
	}
	front, err := console.NewFront(con, console.FrontOptions{Web: cfg.Web, Logger: log})
	if err != nil {
		return nil, err
	}
	return &webConsole{con, front}, nil
}

// reload shows cfg's tasks and reads the users again (SIGHUP); a users'
// file that cannot be read keeps the old users (Front.Reload logs why).
func (w *webConsole) reload(cfg *config.Config) {
	w.con.Reload(cfg)
	w.front.Reload(cfg.Web) //nolint:errcheck // logged; the old users stay
}
