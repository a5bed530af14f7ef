package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/redisconn"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/lease/redisdriver"
)

// operator is who runs an operator command: user@host, for the records.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	h, _ := os.Hostname()
	return name + "@" + h
}

// cliStore opens the config's Redis for an operator command. The in-process
// store lives inside the daemon, so these commands need a [redis] table.
// The data-loss quarantine covers the config's longest lease_ttl, or ttl if
// the command holds a longer lease itself.
func cliStore(cfg *config.Config, cmd string, ttl time.Duration) (*lease.Store, func(), error) {
	if cfg.Redis == nil {
		return nil, nil, fmt.Errorf("%s needs a [redis] table in %s: without one, leases live inside the daemon's process", cmd, cfg.Path)
	}
	redisconn.RouteLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	s, err := app.OpenStore(cfg, lease.Options{Replica: "cli:" + operator(), MaxTTL: ttl})
	if err != nil {
		return nil, nil, err
	}
	done := func() { app.CloseStore(s) } //nolint:errcheck // a lease left held was reported by its release
	if redisconn.TLS(cfg.Redis) {
		// A rediss:// url to a plaintext Redis never answers: say so at
		// once, not as the command's own timeout.
		if err := pingTLS(s); err != nil {
			done()
			return nil, nil, fmt.Errorf("redis %s: %w", redisconn.Where(cfg.Redis), redisconn.Explain(cfg.Redis, err))
		}
	}
	// Beside keys of another layout, what a command reads or writes is not
	// what the replicas see: every command but migrate refuses, and says
	// what to do.
	if cmd != "migrate" {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Fleet().CheckLayout(lctx); errors.Is(err, redisdriver.ErrLayout) {
			done()
			return nil, nil, err
		}
	}
	// A command releases what it holds before this; Close's report of a
	// lease left held (a failed release, already reported) adds nothing.
	return s, done, nil
}

// pingTLS reaches the store's Redis once, within 5s.
func pingTLS(s *lease.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Fleet().Ping(ctx)
}

// loadTask loads the config and finds task in it.
func loadTask(path, task string) (*config.Config, *config.Task, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, err
	}
	t, ok := cfg.Task(task)
	if !ok {
		return nil, nil, fmt.Errorf("no task %q in %s", task, path)
	}
	return cfg, t, nil
}

func runPause(ctx context.Context, args []string, stdout io.Writer, paused bool) error {
	name := map[bool]string{true: "pause", false: "resume"}[paused]
	c := newCmdline(name, "TASK")
	asJSON := c.jsonFlag()
	by := c.byFlag()
	reason := c.fs.String("reason", "", "why, for the record (tickd history, status)")
	var until *time.Duration
	if paused {
		until = c.fs.Duration("for", 0, "resume by itself after this long (0: when resumed)")
	}
	pos, err := c.args(args, 1, 1, "TASK")
	if err != nil {
		return err
	}
	if until != nil && *until < 0 {
		return c.usage("-for %v: must not be negative", *until)
	}
	cfg, t, err := loadTask(*c.config, pos[0])
	if err != nil {
		return err
	}
	store, done, err := cliStore(cfg, name, 0)
	if err != nil {
		return err
	}
	defer done()
	var res ops.Paused
	if paused {
		res, err = ops.Pause(ctx, store, t, *by, *reason, *until, time.Now())
	} else {
		res, err = ops.Resume(ctx, store, t, *by, *reason, time.Now())
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", name, t.Name, err)
	}
	notRecorded(res.Done)
	if *asJSON {
		return printJSON(stdout, report.PauseDoc{Task: t.Name, Paused: paused, Changed: res.Changed, By: *by, Reason: *reason,
			Until: report.Instant(res.Pause.Until), Said: res.Said})
	}
	fmt.Fprintln(stdout, res.Said)
	return nil
}

// notRecorded says on stderr that an action was done but could not be
// recorded in the history: the action is not undone for it, nor made the
// command's failure.
func notRecorded(d ops.Done) {
	if d.Recorded != nil {
		fmt.Fprintf(os.Stderr, "tickd %s: done, but not recorded in the history: %v\n", d.Action.What, d.Recorded)
	}
}

// runMigrate moves an older tickd's keys into this version's layout.
func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	c := newCmdline("migrate", "")
	asJSON := c.jsonFlag()
	by := c.byFlag()
	if _, err := c.args(args, 0, 0); err != nil {
		return err
	}
	cfg, err := config.Load(*c.config)
	if err != nil {
		return err
	}
	store, done, err := cliStore(cfg, "migrate", 0)
	if err != nil {
		return err
	}
	defer done()
	shards := make(map[string]int, len(cfg.Tasks))
	for _, t := range cfg.Tasks {
		shards[t.Name] = t.Shards
	}
	m, d, err := ops.Migrate(ctx, store, shards, *by)
	if err != nil {
		return err // "tickd migrate: " is said once, in front
	}
	notRecorded(d)
	if *asJSON {
		layout, _ := strconv.Atoi(redisdriver.LayoutVersion)
		from, _ := strconv.Atoi(m.Layout.From)
		doc := report.MigrateDoc{Layout: layout, From: from, Tasks: m.Layout.Tasks, Due: m.Layout.Due, Resharded: []report.ReshardDoc{}}
		for i, r := range m.Resharded {
			doc.Resharded = append(doc.Resharded, report.ReshardDoc{Task: r.Task, From: r.From, To: r.To, Entities: r.Entities, FollowUps: r.FollowUps, Due: r.Due,
				Took: m.Took[i].Seconds()})
		}
		return printJSON(stdout, doc)
	}
	fmt.Fprintln(stdout, d.Said)
	return nil
}

func runUnlock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCmdline("unlock", "TASK ENTITY")
	by := c.byFlag()
	asJSON := c.jsonFlag()
	force := c.fs.Bool("force", false, "free the lease at once, though its holder's run may still be going (it may overlap the next run)")
	pos, err := c.args(args, 2, 2, "TASK", "ENTITY")
	if err != nil {
		return err
	}
	cfg, t, err := loadTask(*c.config, pos[0])
	if err != nil {
		return err
	}
	store, done, err := cliStore(cfg, "unlock", 0)
	if err != nil {
		return err
	}
	defer done()
	u, err := ops.Unlock(ctx, store, t, pos[1], *by, *force)
	if errors.Is(err, ops.ErrNotHeld) {
		return fmt.Errorf("no lease held on %s %q: nothing to release", t.Name, pos[1])
	}
	if err != nil {
		return fmt.Errorf("unlock %s %q: %w", t.Name, pos[1], err)
	}
	notRecorded(u.Done)
	said := u.Said
	if u.Freed {
		slog.New(slog.NewTextHandler(stderr, nil)).Warn("lease force-released: the holder's run may still be going", "task", t.Name, "entity", u.Entity,
			"holder", u.Holder, "fence", u.Fence, "held_for", time.Since(u.Since).Round(time.Millisecond).String(), "by", *by)
	}
	if *asJSON {
		return printJSON(stdout, report.UnlockDoc{Task: t.Name, Entity: u.Entity, Holder: u.Holder, Fence: u.Fence,
			Since: report.Instant(u.Since), By: *by, Freed: u.Freed, FreeWithin: u.TTL.Seconds(), Said: said})
	}
	fmt.Fprintln(stdout, said)
	return nil
}
