package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestPartsAroundTheScheduler: an App's parts start after the store and
// before the scheduler, in order, and stop after it, in reverse, each
// within its own time; a part that fails to start keeps the scheduler from
// starting, and Stop stops the parts that started. Reload shows the parts
// the new config. The binary's watchdog, metrics listener and console are
// such parts: this is their lifecycle.
func TestPartsAroundTheScheduler(t *testing.T) {
	t.Parallel()
	var order []string
	part := func(name string, startErr error) Part {
		return Part{
			Name:  name,
			Start: func(context.Context) error { order = append(order, "start "+name); return startErr },
			Stop: func(ctx context.Context) error {
				if d, ok := ctx.Deadline(); !ok || time.Until(d) > time.Minute {
					t.Errorf("%s stopped with no deadline of its own (%v, %v)", name, d, ok)
				}
				order = append(order, "stop "+name)
				return nil
			},
			Reload: func(cfg *config.Config) { order = append(order, "reload "+name+" "+cfg.Tasks[0].Name) },
		}
	}
	open := func() *App {
		a, err := Open(parse(t, "[[tasks]]\nname = \"t\"\nevery = \"1h\"\ncommand = [\"true\"]\n"), Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := open()
	a.Add(part("watchdog", nil))
	a.Add(part("console", nil))
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	expect.True(t, "the scheduler runs after the parts started", a.scheduled)
	if err := a.Reload(parse(t, "[[tasks]]\nname = \"u\"\nevery = \"1h\"\ncommand = [\"true\"]\n")); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"start watchdog", "start console", "reload watchdog u", "reload console u", "stop console", "stop watchdog"}
	expect.True(t, fmt.Sprintf("order %q, want %q", order, want), slices.Equal(order, want))

	order = nil
	b := open()
	boom := errors.New("boom")
	b.Add(part("watchdog", nil))
	b.Add(part("metrics", boom))
	b.Add(part("console", nil))
	if err := b.Start(ctx); !errors.Is(err, boom) {
		t.Fatalf("a failed start: %v", err)
	}
	expect.True(t, "no scheduler after a part failed", !b.scheduled)
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want = []string{"start watchdog", "start metrics", "stop watchdog"}
	expect.True(t, fmt.Sprintf("order after a failed start %q, want %q", order, want), slices.Equal(order, want))
}
