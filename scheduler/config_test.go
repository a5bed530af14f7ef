package scheduler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodTask = `
[[tasks]]
name = "sync"
every = "15m"
command = ["true"]
`

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, toml, want string
	}{
		{"malformed TOML", "[daemon\nlog_level = 1", "cfg.toml:2: expected"},
		{"unknown key", "[daemon]\nlog_levle = \"info\"\n" + goodTask, "cfg.toml:2: daemon.log_levle: unknown key"},
		{"unknown task key", goodTask + "comand = [\"x\"]\n", "cfg.toml:6: tasks[0].comand: unknown key"},
		{"unknown table", "[redis_]\nurl = \"x\"\n" + goodTask, "cfg.toml:2: redis_.url: unknown key"},
		{"wrong type", goodTask + "concurrency = \"8\"\n", "cfg.toml:6"},
		{"bad duration", "[[tasks]]\nname = \"a\"\nevery = \"15 minutes\"\ncommand = [\"true\"]\n", `cfg.toml:3: tasks.every: bad duration "15 minutes"`},
		{"zero every", "[[tasks]]\nname = \"a\"\nevery = \"0s\"\ncommand = [\"true\"]\n", "cfg.toml:3: tasks[0].every: must be more than 0s"},
		{"sub-second every", "[[tasks]]\nname = \"a\"\nevery = \"1500ms\"\ncommand = [\"true\"]\n", "tasks[0].every: 1.5s: must be a whole number of seconds"},
		{"cron with 7 fields", "[[tasks]]\nname = \"a\"\ncron = \"* * * * * * *\"\ncommand = [\"true\"]\n", "cfg.toml:3: tasks[0].cron: \"* * * * * * *\" has 7 fields"},
		{"@every refused", "[[tasks]]\nname = \"a\"\ncron = \"@every 1m\"\ncommand = [\"true\"]\n", "tasks[0].cron: \"@every 1m\": @every counts from process start"},
		{"unknown timezone", goodTask + "timezone = \"Mars/Olympus\"\n", `cfg.toml:6: tasks[0].timezone: unknown timezone "Mars/Olympus"`},
		{"both schedules", goodTask + "cron = \"* * * * *\"\n", "cfg.toml:4: tasks[0].every: both every and cron given"},
		{"no schedule", "[[tasks]]\nname = \"a\"\ncommand = [\"true\"]\n", "tasks[0].every: missing: give every or cron"},
		{"two actions", goodTask + "url = \"http://x\"\n", "cfg.toml:5: tasks[0].command: give only one of command, url, handler"},
		{"no action", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\n", "cfg.toml:1: tasks[0].command: no action"},
		{"two sources", goodTask + "entities = [\"1\"]\nentities_file = \"/x\"\n", "cfg.toml:6: tasks[0].entities: give only one of entities"},
		{"duplicate name", goodTask + goodTask, `cfg.toml:8: tasks[1].name: duplicate task name "sync" (also tasks[0])`},
		{"missing name", "[[tasks]]\nevery = \"1m\"\ncommand = [\"true\"]\n", "tasks[0].name: missing"},
		{"bad name", "[[tasks]]\nname = \"a b\"\nevery = \"1m\"\ncommand = [\"true\"]\n", `cfg.toml:2: tasks[0].name: "a b": use letters`},
		{"lease_ttl too short", goodTask + "lease_ttl = \"1s\"\n", "cfg.toml:6: tasks[0].lease_ttl: 1s: too short to renew"},
		{"on_busy", goodTask + "on_busy = \"wait\"\n", `cfg.toml:6: tasks[0].on_busy: "wait": use skip or queue`},
		{"concurrency", goodTask + "concurrency = 0\n", "cfg.toml:6: tasks[0].concurrency: 0: must be at least 1"},
		{"reschedule code", goodTask + "reschedule_exit_code = 300\n", "tasks[0].reschedule_exit_code: 300"},
		{"spread too long", goodTask + "spread = \"20m\"\n", "cfg.toml:6: tasks[0].spread: 20m0s: must be shorter than every"},
		{"log level", "[daemon]\nlog_level = \"loud\"\n" + goodTask, `cfg.toml:2: daemon.log_level: "loud"`},
		{"redis url", "[redis]\nurl = \"http://x\"\n" + goodTask, "cfg.toml:2: redis.url: must start with redis://"},
		{"key prefix", "[redis]\nkey_prefix = \"a{b}\"\n" + goodTask, `cfg.toml:2: redis.key_prefix: "a{b}"`},
		{"no tasks", "[daemon]\n", "cfg.toml: tasks: no [[tasks]]"},
		{"defaults name", "[defaults]\nname = \"x\"\n" + goodTask, "cfg.toml:2: defaults.name"},
		{"bad default applies to tasks", "[defaults]\nlease_ttl = \"100ms\"\n" + goodTask, "tasks[0].lease_ttl: 100ms: too short"},
		{"NUL in an entity id", goodTask + "entities = [\"ok\", \"a\\u0000b\"]\n", "cfg.toml:6: tasks[0].entities: entity 1: bad entity id: holds a NUL byte"},
		{"negative duration", goodTask + "timeout = \"-1s\"\n", `negative duration "-1s"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig("cfg.toml", []byte(c.toml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.toml)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, c.want)
			}
		})
	}
}

func TestConfigEveryErrorReported(t *testing.T) {
	// Several problems are reported together, not only the first.
	_, err := ParseConfig("cfg.toml", []byte("[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\non_busy = \"x\"\nconcurrency = 0\n"))
	if err == nil || !strings.Contains(err.Error(), "on_busy") || !strings.Contains(err.Error(), "concurrency") {
		t.Fatalf("%v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig("cfg.toml", []byte(`
[defaults]
lease_ttl = "30s"
timezone = "Europe/Berlin"
retries = 2

[[tasks]]
name = "a"
every = "15m"
command = ["true"]

[[tasks]]
name = "b"
cron = "0 * * * *"
url = "http://127.0.0.1/x"
retries = 0
timezone = "UTC"
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Tasks[0], cfg.Tasks[1]
	if a.LeaseTTL != 30*time.Second || a.Retries != 2 || a.Location.String() != "Europe/Berlin" || a.Concurrency != 4 || a.OnBusy != "skip" {
		t.Fatalf("a: %+v", a)
	}
	if b.Retries != 0 || b.Location != time.UTC || b.LeaseTTL != 30*time.Second {
		t.Fatalf("b: %+v", b)
	}
	if cfg.Redis != nil || cfg.Daemon.ShutdownTimeout.Duration != 30*time.Second || cfg.Daemon.LogLevel != "info" {
		t.Fatalf("daemon %+v redis %+v", cfg.Daemon, cfg.Redis)
	}
	if !a.Singleton() {
		t.Fatal("a has no entity source: singleton")
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join("..", "config.example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis != nil {
		t.Fatal("the example must run without Redis")
	}
	// Every key of TaskSpec is documented in the example.
	data, _ := os.ReadFile(filepath.Join("..", "config.example.toml"))
	for _, key := range []string{"replica_id", "shutdown_timeout", "log_level", "log_format", "metrics_addr", "url", "key_prefix",
		"every", "cron", "timezone", "spread", "entities", "entities_file", "entities_command", "entities_timeout",
		"command", "handler", "concurrency", "timeout", "warn_after", "lease_ttl", "on_busy", "reschedule_exit_code",
		"reschedule_delay", "max_reschedules", "retries", "catch_up"} {
		if !strings.Contains(string(data), key+" ") {
			t.Errorf("config.example.toml does not document %s", key)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodTask))
	f.Add([]byte("[daemon]\nlog_level = \"debug\"\n[redis]\nurl = \"redis://x\"\n" + goodTask))
	f.Add([]byte("[[tasks]]\nname = \"a\"\ncron = \"*/5 * * * *\"\ncommand = [\"x\", \"{entity}\"]\nentities = [\"1\"]\nspread = \"1m\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("fuzz.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, task := range cfg.Tasks {
			if task.Schedule == nil || task.Concurrency < 1 || task.LeaseTTL <= 0 {
				t.Fatalf("accepted an invalid task: %+v", task)
			}
			task.Schedule.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		}
	})
}
