package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/listen"
	"github.com/tickd/tickd/internal/redisconn"
	"github.com/tickd/tickd/internal/regular"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/lease/redisdriver"
	"github.com/tickd/tickd/schedule"
)

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCmdline("check", "")
	tryRedis := c.fs.Bool("redis", false, "also connect to the config's Redis")
	from := c.fs.String("from", "", "list the ticks after this instant (RFC 3339, e.g. 2027-03-28T00:00:00Z) instead of now")
	n := c.fs.Int("n", 5, "how many ticks to list per task")
	entity := c.fs.String("entity", "", "also list this entity's ticks in each task, in its own zone (timezone_from): reads the tasks' sources")
	asJSON := c.jsonFlag()
	if _, err := c.args(args, 0, 0); err != nil {
		return err
	}
	start := time.Now()
	if *from != "" {
		t, err := time.Parse(time.RFC3339, *from)
		if err != nil {
			return c.usage("-from %q: want an RFC 3339 instant such as 2027-03-28T00:00:00Z", *from)
		}
		start = t
	}
	if *n < 1 || *n > 1000 {
		return c.usage("-n %d: list 1 to 1000 ticks", *n)
	}
	cfg, err := loadServed(*c.config)
	if err != nil {
		return err
	}
	doc := report.CheckDoc{Tasks: []report.CheckTaskDoc{}, Leases: "in-process", Warnings: append(runWarnings(cfg), unitWarnings(cfg)...)}
	if cfg.Redis != nil {
		doc.Leases = "redis " + redisconn.Where(cfg.Redis)
		if redisconn.InsecureTLS(cfg.Redis) {
			doc.Warnings = append(doc.Warnings, fmt.Sprintf("%s: redis.url: skip_verify=true: the server's TLS certificate is not checked, so anyone on the path can pose as Redis", cfg.Path))
		}
	}
	tds, warns := checkTasks(ctx, cfg, start, *n, *entity)
	doc.Tasks, doc.Warnings = tds, append(doc.Warnings, warns...)
	users := cfg.LimitUsers()
	doc.Limits = []report.CheckLimit{}
	for _, l := range cfg.Limits {
		doc.Limits = append(doc.Limits, report.CheckLimit{Name: l.Name, Says: l.String(), Tasks: append([]string{}, users[l.Name]...)})
		if len(users[l.Name]) == 0 {
			doc.Warnings = append(doc.Warnings, fmt.Sprintf("%s: limit %s is named by no task", cfg.Path, l.Name))
		}
	}
	var redisErr error
	if *tryRedis {
		var recorded map[string]int
		if recorded, redisErr = pingRedis(ctx, cfg); redisErr == nil {
			doc.Redis = "answers"
			for i := range doc.Tasks {
				doc.Tasks[i].RecordedShards = recorded[doc.Tasks[i].Name]
			}
		}
	}
	if *asJSON {
		if redisErr != nil {
			return redisErr // run prints it as {"error": …}
		}
		return printJSON(stdout, doc)
	}
	printCheck(stdout, stderr, doc)
	return redisErr
}

// checkTasks lists each task's next n ticks after start, and, when entity
// is not "", that entity's (checkEntity), with what is wrong with it.
func checkTasks(ctx context.Context, cfg *config.Config, start time.Time, n int, entity string) ([]report.CheckTaskDoc, []string) {
	tds, warns := []report.CheckTaskDoc{}, []string{}
	for _, t := range cfg.Tasks {
		td := report.CheckTaskDoc{Name: t.Name, Schedule: t.ScheduleText(), Timezone: t.Location.String(),
			Source: report.DescribeSource(t), Ticks: []report.CheckTickDoc{}, Shards: max(t.Shards, 1), Entities: []report.CheckEntityDoc{}}
		at := start
		for range n {
			if at = t.Schedule.Next(at); at.IsZero() {
				break
			}
			td.Ticks = append(td.Ticks, report.CheckTickDoc{Tick: report.Instant(at), Local: at.In(t.Location).Format(time.RFC3339), DST: schedule.DSTNote(t.Schedule, at)})
		}
		if entity != "" {
			e, warn := checkEntity(ctx, t, entity, start, n)
			td.Entities = append(td.Entities, e)
			if warn != "" {
				warns = append(warns, fmt.Sprintf("%s: task %s: %s", cfg.Path, t.Name, warn))
			}
		}
		tds = append(tds, td)
	}
	return tds, warns
}

// printCheck writes check's document for people: each task's next ticks in
// its zone, marked where daylight saving moved one; warnings on stderr.
func printCheck(stdout, stderr io.Writer, doc report.CheckDoc) {
	for _, t := range doc.Tasks {
		fmt.Fprintf(stdout, "%s: %s in %s, %s%s\n", t.Name, t.Schedule, t.Timezone, t.Source, shardsNote(t))
		for _, tk := range t.Ticks {
			note := ""
			if tk.DST != "" {
				note = "   <- " + tk.DST
			}
			fmt.Fprintf(stdout, "  %s%s\n", tk.Local, note)
		}
		for _, e := range t.Entities {
			printCheckEntity(stdout, e)
		}
	}
	for _, l := range doc.Limits {
		shared := "named by no task"
		if len(l.Tasks) > 0 {
			shared = "for " + strings.Join(l.Tasks, ", ")
		}
		fmt.Fprintf(stdout, "limit %s: %s, across every replica; %s\n", l.Name, l.Says, shared)
	}
	if doc.Leases == "in-process" {
		fmt.Fprintln(stdout, "leases: in-process (no [redis] table): one replica only")
	} else {
		fmt.Fprintf(stdout, "leases: %s\n", doc.Leases)
	}
	// What would fail only at run time, on this host: warned about, since
	// the file or the program may be put in place before tickd runs.
	for _, w := range doc.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if doc.Redis != "" {
		fmt.Fprintf(stdout, "redis: answers; key layout %s\n", redisdriver.LayoutVersion)
	}
}

// shardsNote says a task's shard count: the config's, and the one recorded
// in Redis when check -redis read it.
func shardsNote(t report.CheckTaskDoc) string {
	switch {
	case t.RecordedShards == 0 && t.Shards == 1:
		return ""
	case t.RecordedShards == 0:
		return fmt.Sprintf(", %d shards", t.Shards)
	case t.RecordedShards == t.Shards:
		return fmt.Sprintf(", %d shard(s), as recorded in Redis", t.Shards)
	}
	return fmt.Sprintf(", %d shard(s) in the config but %d recorded in Redis, in force: tickd migrate reshards it", t.Shards, t.RecordedShards)
}

// runWarnings lists what the config names that is not there on this host
// (an entities_file that cannot be read, a command or entities_command not
// on PATH), and secrets it may let out (a token in a URL's query,
// entities_headers sent over plain http to another host).
func runWarnings(cfg *config.Config) []string {
	ws := []string{}
	for i, t := range cfg.Tasks {
		at := fmt.Sprintf("%s: tasks[%d] (%s)", cfg.Path, i, t.Name)
		if u, err := url.Parse(t.URL); t.URL != "" && err == nil && (u.User != nil || u.RawQuery != "") {
			ws = append(ws, fmt.Sprintf("%s: url: it carries a user part or a query, which may be a secret: tickd shows it without them (errors, history, status, the console), but the config holds them; a token is better in headers, from the environment (${NAME})", at))
		}
		if u, err := url.Parse(t.EntitiesURL); t.EntitiesURL != "" && err == nil {
			if u.RawQuery != "" {
				ws = append(ws, fmt.Sprintf("%s: entities_url: it carries a query, which may be a secret: tickd shows it without it, but the config holds it; a token is better in entities_headers, from the environment (${NAME})", at))
			}
			if u.Scheme == "http" && len(t.EntitiesHeaders) > 0 && !listen.Loopback(net.JoinHostPort(u.Hostname(), "0")) {
				ws = append(ws, fmt.Sprintf("%s: entities_url: its entities_headers go in clear over http:// to %s: use https://", at, u.Host))
			}
		}
		if t.EntitiesFile != "" {
			if f, err := regular.Open(t.EntitiesFile, regular.MaxEntitiesFile); err != nil {
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

// pingRedis connects to the config's Redis, as the daemon would, checks
// its key layout, and reads the shard count recorded for each task.
func pingRedis(ctx context.Context, cfg *config.Config) (map[string]int, error) {
	if cfg.Redis == nil {
		return nil, errors.New("-redis: the config has no [redis] table")
	}
	redisconn.RouteLogs(slog.New(slog.DiscardHandler)) // the one error below says it all
	c, err := redisClient(cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", redisconn.Where(cfg.Redis), redisconn.Explain(cfg.Redis, err))
	}
	d, err := redisdriver.New(c, cfg.Redis.KeyPrefix, cfg.Redis.ReplicaAcks)
	if err != nil {
		return nil, err
	}
	s := lease.New(d, lease.Options{})
	defer app.CloseStore(s) //nolint:errcheck // a check holds no lease
	if err := s.Fleet().CheckLayout(pctx); err != nil {
		return nil, fmt.Errorf("redis %s answers, but: %w", redisconn.Where(cfg.Redis), err)
	}
	names := make([]string, len(cfg.Tasks))
	for i, t := range cfg.Tasks {
		names[i] = t.Name
	}
	recorded, err := s.Fleet().RecordedShards(pctx, names) // none recorded: absent, the config's is what the first tick records
	if err != nil {
		return nil, fmt.Errorf("redis %s: read the shard counts: %w", redisconn.Where(cfg.Redis), err)
	}
	return recorded, nil
}
