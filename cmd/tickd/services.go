package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/tickd/tickd/internal/logs"
)

// service is the one lifecycle every part of the daemon has, as the lease
// store, the scheduler and the console have it: Start brings the part up
// (its ctx bounds the start, not the part's life), Stop takes it down within
// its ctx.
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// services start the daemon's parts in order and stop them in reverse: the
// scheduler, started last, stops first, while the store it releases leases
// to, the health endpoints and the systemd watchdog still run.
type services struct {
	log     *slog.Logger
	running []running
}

type running struct {
	name   string
	svc    service
	within func() time.Duration // how long its Stop may take
}

// start starts svc, which Stop gives within to stop.
func (ss *services) start(ctx context.Context, name string, svc service, within func() time.Duration) error {
	if err := svc.Start(ctx); err != nil {
		return err
	}
	ss.running = append(ss.running, running{name, svc, within})
	return nil
}

// stopAll stops what started, last first; an error is logged, and the
// others are stopped all the same.
func (ss *services) stopAll() {
	for i := len(ss.running) - 1; i >= 0; i-- {
		r := ss.running[i]
		d := r.within()
		ctx, cancel := context.WithTimeoutCause(context.Background(), d, fmt.Errorf("%s: its stop timeout (%s) reached", r.name, d))
		if err := r.svc.Stop(ctx); err != nil {
			ss.log.Warn("stopped with an error", "service", r.name, logs.KeyError, err)
		}
		cancel()
	}
	ss.running = nil
}

// shortStop is how long a part that holds no run may take to stop.
func shortStop() time.Duration { return 2 * time.Second }

// funcs is a service made of two functions.
type funcs struct {
	start, stop func(context.Context) error
}

func (f funcs) Start(ctx context.Context) error { return f.start(ctx) }
func (f funcs) Stop(ctx context.Context) error  { return f.stop(ctx) }

// loop is a service that runs fn in a goroutine until Stop, which cancels
// fn's context and waits for it to return.
func loop(fn func(context.Context)) service {
	var cancel context.CancelFunc
	done := make(chan struct{})
	return funcs{
		start: func(context.Context) error {
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			go func() { defer close(done); fn(ctx) }()
			return nil
		},
		stop: func(ctx context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		},
	}
}

// watchdog sends WATCHDOG=1 at half the interval systemd asks for, until
// Stop; without a watchdog, it does nothing.
func watchdog() service {
	return loop(func(ctx context.Context) {
		iv, err := daemon.SdWatchdogEnabled(false)
		if err != nil || iv == 0 {
			return
		}
		t := time.NewTicker(iv / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				daemon.SdNotify(false, daemon.SdNotifyWatchdog) //nolint:errcheck
			}
		}
	})
}
