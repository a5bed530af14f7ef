package main

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/tickd/tickd/internal/app"
)

// service is a part of the daemon with its own Start and Stop, as the
// console's front and the metrics listener have them: Start brings it up
// (its ctx bounds the start, not its life), Stop takes it down within its
// ctx.
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// servicePart is svc as a part of the App's lifecycle.
func servicePart(name string, svc service) app.Part {
	return app.Part{Name: name, Start: svc.Start, Stop: svc.Stop}
}

// loopPart is a part that runs fn in a goroutine from Start until Stop,
// which cancels fn's context and waits for it to return.
func loopPart(name string, fn func(context.Context)) app.Part {
	var cancel context.CancelFunc
	done := make(chan struct{})
	return app.Part{
		Name: name,
		Start: func(context.Context) error {
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			go func() { defer close(done); fn(ctx) }()
			return nil
		},
		Stop: func(ctx context.Context) error {
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
// ctx is done; without a watchdog, it returns at once.
func watchdog(ctx context.Context) {
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
}

// errStopped: a signal asked tickd to stop before it started.
var errStopped = errors.New("stop requested during start-up")

// startUnlessStopped starts a (app.App.Start); a stopping signal meanwhile
// (a rolling restart's SIGTERM while the replica id is claimed) cancels the
// start, and it returns errStopped. A SIGHUP then is moot: the config was
// just read.
func startUnlessStopped(ctx context.Context, a *app.App, sigs <-chan os.Signal) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	started, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case sig := <-sigs:
				if sig != syscall.SIGHUP {
					cancel(errStopped)
					return
				}
			case <-started:
				return
			}
		}
	}()
	err := a.Start(sctx)
	close(started)
	<-watched
	if errors.Is(context.Cause(sctx), errStopped) { // a signal the watch took is not lost
		return errStopped
	}
	return err
}
