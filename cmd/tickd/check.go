package main

import (
	"fmt"
	"io"
	"time"

	"github.com/tickd/tickd/scheduler"
)

func runCheck(args []string, stdout io.Writer) error {
	c := newCmdline("check", "")
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
		fmt.Fprintf(stdout, "leases: redis %s, key prefix %q\n", redactURL(cfg.Redis.URL), cfg.Redis.KeyPrefix)
	}
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
