package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tickd/tickd/config"
)

// A Part runs beside tickd's own parts, in the one lifecycle the binary
// and an embedding program share: what only the binary adds (the systemd
// watchdog, the metrics listener, the console's own server, the watches of
// Redis and of the config file) is a Part of its App. Start runs after the
// lease store started and before the replica id is claimed and the
// scheduler starts; Stop after the scheduler stopped and the replica's
// announcement was withdrawn, last added first, before the store and the
// tracer stop; Reload, when set, with each config Reload takes.
type Part struct {
	Name   string
	Start  func(ctx context.Context) error // nil: nothing to start
	Stop   func(ctx context.Context) error // nil: nothing to stop
	Reload func(cfg *config.Config)        // nil: the config is not its business
}

// partStop is how long a Part's Stop may take: a part holds no run.
const partStop = 2 * time.Second

// Add adds p to the App's parts, before Start.
func (a *App) Add(p Part) { a.parts = append(a.parts, p) }

// startParts starts the parts in the order they were added; one that
// fails stops the start (Stop stops the ones that started).
func (a *App) startParts(ctx context.Context) error {
	for _, p := range a.parts {
		if p.Start != nil {
			if err := p.Start(ctx); err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
		}
		a.partsUp++
	}
	return nil
}

// stopParts stops the parts that started, last first, each within
// partStop; a part's error is returned (Stop's caller logs it once), and
// the others stop all the same.
func (a *App) stopParts() error {
	var errs []error
	for ; a.partsUp > 0; a.partsUp-- {
		p := a.parts[a.partsUp-1]
		if p.Stop == nil {
			continue
		}
		ctx, cancel := context.WithTimeoutCause(context.Background(), partStop, fmt.Errorf("%s: its stop timeout (%s) reached", p.Name, partStop))
		if err := p.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// reloadParts shows cfg to the parts that read it.
func (a *App) reloadParts(cfg *config.Config) {
	for _, p := range a.parts {
		if p.Reload != nil {
			p.Reload(cfg)
		}
	}
}
