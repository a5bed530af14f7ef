package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// The daemon's parts stop in the reverse of their start, each within its
// own time, and a failed start leaves the others to be stopped.
func TestServicesStopInReverse(t *testing.T) {
	t.Parallel()
	var order []string
	part := func(name string, startErr error) service {
		return funcs{
			start: func(context.Context) error { order = append(order, "start "+name); return startErr },
			stop: func(ctx context.Context) error {
				d, ok := ctx.Deadline()
				if !ok || time.Until(d) > time.Minute {
					t.Errorf("%s stopped with no deadline of its own (%v, %v)", name, d, ok)
				}
				order = append(order, "stop "+name)
				return nil
			},
		}
	}
	ss := &services{log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	for _, name := range []string{"watchdog", "store", "scheduler"} {
		if err := ss.start(ctx, name, part(name, nil), shortStop); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("boom")
	if err := ss.start(ctx, "console", part("console", boom), shortStop); !errors.Is(err, boom) {
		t.Fatalf("a failed start: %v", err)
	}
	ss.stopAll()
	want := []string{"start watchdog", "start store", "start scheduler", "start console", "stop scheduler", "stop store", "stop watchdog"}
	if !slices.Equal(order, want) {
		t.Errorf("order %q, want %q", order, want)
	}
}
