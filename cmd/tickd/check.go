package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCmdline("check", "")
	tryRedis := c.fs.Bool("redis", false, "also connect to the config's Redis")
	if _, err := c.args(args, 0, 0); err != nil {
		return err
	}
	cfg, err := scheduler.LoadConfig(*c.config)
	if err != nil {
		return err
	}
	now := newClock().Now()
	for _, t := range cfg.Tasks {
		sched := "every " + t.Every.String()
		if t.Cron != "" {
			sched = "cron " + fmt.Sprintf("%q", t.Cron)
		}
		fmt.Fprintf(stdout, "%s: %s in %s, %s\n", t.Name, sched, t.Location, describeSource(t))
		at := now
		for range 5 {
			at = t.Schedule.Next(at)
			fmt.Fprintf(stdout, "  %s\n", at.In(t.Location).Format(time.RFC3339))
		}
	}
	if cfg.Redis == nil {
		fmt.Fprintln(stdout, "leases: in-process (no [redis] table): one replica only")
	} else {
		fmt.Fprintf(stdout, "leases: redis %s, key prefix %q\n", cfg.Redis.Where(), cfg.Redis.KeyPrefix)
	}
	// What would fail only at run time, on this host: warned about, since
	// the file or the program may be put in place before tickd runs.
	for _, w := range runWarnings(cfg) {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if *tryRedis {
		return pingRedis(ctx, cfg, stdout)
	}
	return nil
}

// runWarnings lists what the config names that is not there on this host:
// an entities_file that cannot be read, a command or entities_command not
// on PATH.
func runWarnings(cfg *scheduler.Config) []string {
	var ws []string
	for i, t := range cfg.Tasks {
		at := fmt.Sprintf("%s: tasks[%d] (%s)", cfg.Path, i, t.Name)
		if t.EntitiesFile != "" {
			if f, err := os.Open(t.EntitiesFile); err != nil {
				ws = append(ws, fmt.Sprintf("%s: entities_file: %v", at, err))
			} else {
				f.Close()
			}
		}
		for key, argv := range map[string][]string{"command": t.Command, "entities_command": t.EntitiesCommand} {
			if len(argv) > 0 {
				if _, err := exec.LookPath(argv[0]); err != nil {
					ws = append(ws, fmt.Sprintf("%s: %s: %v", at, key, err))
				}
			}
		}
	}
	sort.Strings(ws)
	return ws
}

// pingRedis connects to the config's Redis, as the daemon would.
func pingRedis(ctx context.Context, cfg *scheduler.Config, stdout io.Writer) error {
	if cfg.Redis == nil {
		return errors.New("-redis: the config has no [redis] table")
	}
	routeRedisLogs(slog.New(slog.DiscardHandler)) // the one error below says it all
	c, err := redisClient(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", cfg.Redis.Where(), err)
	}
	s, err := lease.NewRedis(c, cfg.Redis.KeyPrefix, lease.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.CheckLayout(pctx); err != nil {
		return fmt.Errorf("redis %s answers, but: %w", cfg.Redis.Where(), err)
	}
	fmt.Fprintf(stdout, "redis: %s answers; key layout %s\n", cfg.Redis.Where(), lease.LayoutVersion)
	return nil
}

func describeSource(t scheduler.Task) string {
	switch {
	case t.Entities != nil:
		return fmt.Sprintf("%d static entities", len(t.Entities))
	case t.EntitiesFile != "":
		return "entities from " + t.EntitiesFile
	case t.EntitiesCommand != nil:
		return fmt.Sprintf("entities from command %q", t.EntitiesCommand[0])
	}
	return "singleton"
}
