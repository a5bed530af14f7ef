package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// httpTask is a good task with an HTTP action, without its final newline's key.
const httpTask = "[[tasks]]\nname = \"h\"\nevery = \"1m\"\nurl = \"http://127.0.0.1:1/x\"\n"

// TestHeadersFromTheEnvironment: ${NAME} in a header is the environment's
// NAME, read at load; [defaults]' headers serve every HTTP task.
func TestHeadersFromTheEnvironment(t *testing.T) {
	t.Setenv("TICKD_TEST_TOKEN", "s3cret")
	cfg, err := Parse("cfg.toml", []byte("[defaults]\nheaders = { Authorization = \"Bearer ${TICKD_TEST_TOKEN}\", X-Plain = \"a$b\" }\n"+
		httpTask+strings.Replace(httpTask, `"h"`, `"h2"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range cfg.Tasks {
		if got := fmt.Sprint(task.Headers); got != "map[Authorization:Bearer s3cret X-Plain:a$b]" {
			t.Errorf("%s: headers %s", task.Name, got)
		}
	}
}

// TestHeartbeatURLPerTask: {task} in [defaults]' heartbeat_url gives each
// task its own check; ${NAME} is the environment's; a trailing / is cut;
// an error never shows the URL (its path is the check's secret).
func TestHeartbeatURLPerTask(t *testing.T) {
	t.Setenv("TICKD_TEST_PING_KEY", "k3y")
	cfg, err := Parse("cfg.toml", []byte("[defaults]\nheartbeat_url = \"https://hc-ping.com/${TICKD_TEST_PING_KEY}/{task}/\"\n"+
		httpTask+strings.Replace(httpTask, `"h"`, `"h2"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "h's", cfg.Tasks[0].HeartbeatURL, "https://hc-ping.com/k3y/h")
	expect.Equal(t, "h2's", cfg.Tasks[1].HeartbeatURL, "https://hc-ping.com/k3y/h2")
	_, err = Parse("cfg.toml", []byte(httpTask+"heartbeat_url = \"ftp://s3cret-check\"\n"))
	expect.True(t, "refused without the URL: "+fmt.Sprint(err), err != nil && !strings.Contains(err.Error(), "s3cret"))
}

// TestHeartbeatURLKeepsItsQuery: a check URL with a query of its own
// (Healthchecks' ?create=1) is taken, its path's last slash dropped.
func TestHeartbeatURLKeepsItsQuery(t *testing.T) {
	cfg, err := Parse("cfg.toml", []byte(httpTask+"heartbeat_url = \"https://hc-ping.com/key/{task}/?create=1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "the URL", cfg.Tasks[0].HeartbeatURL, "https://hc-ping.com/key/"+cfg.Tasks[0].Name+"?create=1")
}

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
		{"wrong type", goodTask + "concurrency = \"8\"\n", `cfg.toml:6: tasks[0].concurrency: want an integer, got the string "8"`},
		{"a boolean as a string", "[daemon]\nwatch_config = \"yes\"\n" + goodTask, `cfg.toml:2: daemon.watch_config: want true or false, got the string "yes"`},
		{"wrong list type", goodTask + "entities = [\"a\", 2]\n", `cfg.toml:6: tasks[0].entities: want a list of strings, element 1 is the integer 2`},
		{"duration as a number", goodTask + "lease_ttl = 60\n", `cfg.toml:6: tasks[0].lease_ttl: want a duration such as "90s" or "15m", got the integer 60`},
		{"hint for a typo", goodTask + "evry = \"1m\"\n", `cfg.toml:6: tasks[0].evry: unknown key (did you mean "every"?)`},
		{"follow_redirects misspelt", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\nurl = \"https://x/\"\nfollow_redirects = \"same-host\"\n", `tasks[0].follow_redirects: "same-host": use "none" (the default) or "same-origin"`},
		{"follow_redirects without url", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\nfollow_redirects = \"none\"\n", `tasks[0].follow_redirects: only an HTTP action (url) follows redirects`},
		{"{entity} in a shell's script", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"/bin/sh\", \"-c\", \"work {entity}\"]\n", `tasks[0].command: {entity} inside a shell's script (sh -c): an entity id would be read as shell words; use "$TICKD_ENTITY"`},
		{"{entity} in a shell's script behind a wrapper", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"timeout\", \"30\", \"sh\", \"-c\", \"work {entity}\"]\n", `{entity} inside a shell's script (sh -c)`},
		{"{entity} in a shell's script behind env", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"env\", \"A=b\", \"bash\", \"-c\", \"work {entity}\"]\n", `{entity} inside a shell's script (bash -c)`},
		{"{entity} in bash -lc's script", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"bash\", \"-lc\", \"work '{entity}'\"]\n", `{entity} inside a shell's script (bash -c)`},
		{"unknown placeholder", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"echo\", \"--id={entitiy}\"]\n", `cfg.toml:4: tasks[0].command: unknown placeholder {entitiy} (did you mean {entity}?)`},
		{"a placeholder never replaced", "[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"echo\", \"{tick}\"]\n", `tasks[0].command: unknown placeholder {tick}: only {entity} is replaced`},
		{"hint for a task key in [daemon]", "[daemon]\nlease_ttl = \"1m\"\n" + goodTask, `cfg.toml:2: daemon.lease_ttl: unknown key (a task key: give it in [defaults] or a [[tasks]] entry)`},
		{"hint for a table", "[redis_]\nurl = \"x\"\n" + goodTask, `cfg.toml:2: redis_.url: unknown key: no table [redis_] (did you mean "redis"?)`},
		{"[[task]] for [[tasks]]", "[[task]]\nname = \"a\"\n", `cfg.toml:1: task: unknown key (did you mean "tasks"?)`},
		{"tasks as a table", "[tasks]\nname = \"a\"\n", `cfg.toml:1: tasks: want [[tasks]] tables, got a table`},
		{"console off loopback without auth", "[web]\nlisten = \"0.0.0.0:8080\"\n" + goodTask, `cfg.toml:2: web.listen: "0.0.0.0:8080" is not a loopback address: set htpasswd_file`},
		{"console without an address", "[web]\nadmins = [\"ops\"]\n" + goodTask, `cfg.toml:1: web.listen: required`},
		{"console admins without users", "[web]\nlisten = \"127.0.0.1:8080\"\nadmins = [\"ops\"]\n" + goodTask, `cfg.toml:3: web.admins: admins need users`},
		{"console base path ending in /", "[web]\nlisten = \"127.0.0.1:8080\"\nbase_path = \"/tickd/\"\n" + goodTask, `cfg.toml:3: web.base_path: "/tickd/": want "" or a path such as "/tickd"`},
		{"console base path with ..", "[web]\nlisten = \"127.0.0.1:8080\"\nbase_path = \"/a/../b\"\n" + goodTask, `cfg.toml:3: web.base_path: "/a/../b": segment ".."`},
		{"console TLS half given", "[web]\nlisten = \"127.0.0.1:8080\"\ntls_key_file = \"k\"\n" + goodTask, `web.tls_cert_file: give tls_cert_file and tls_key_file together`},
		{"entities_format misspelt", goodTask + "entities_file = \"/x\"\nentities_format = \"json\"\n", `tasks[0].entities_format: "json": want "lines" (one id a line) or "jsonl"`},
		{"entities_format without a file or command", goodTask + "entities_format = \"jsonl\"\n", `tasks[0].entities_format: is for entities_file, entities_command or entities_url`},
		{"timezone_from not a name", goodTask + "entities_file = \"/x\"\nentities_format = \"jsonl\"\ntimezone_from = \"TZ\"\n", `tasks[0].timezone_from: "TZ": an attribute's name`},
		{"timezone_from without jsonl", goodTask + "entities_file = \"/x\"\ntimezone_from = \"tz\"\n", `tasks[0].timezone_from: names an entity attribute: give entities_format = "jsonl"`},
		{"bad duration", "[[tasks]]\nname = \"a\"\nevery = \"15 minutes\"\ncommand = [\"true\"]\n", `cfg.toml:3: tasks[0].every: bad duration "15 minutes"`},
		{"zero every", "[[tasks]]\nname = \"a\"\nevery = \"0s\"\ncommand = [\"true\"]\n", "cfg.toml:3: tasks[0].every: must be more than 0s"},
		{"sub-second every", "[[tasks]]\nname = \"a\"\nevery = \"1500ms\"\ncommand = [\"true\"]\n", "tasks[0].every: 1.5s: must be a whole number of seconds"},
		{"cron with 7 fields", "[[tasks]]\nname = \"a\"\ncron = \"* * * * * * *\"\ncommand = [\"true\"]\n", "cfg.toml:3: tasks[0].cron: \"* * * * * * *\" has 7 fields"},
		{"cron that can never fire", "[[tasks]]\nname = \"a\"\ncron = \"0 0 30 2 *\"\ncommand = [\"true\"]\n", "cfg.toml:3: tasks[0].cron: \"0 0 30 2 *\" can never fire"},
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
		{"on_busy", goodTask + "on_busy = \"wait\"\n", `cfg.toml:6: tasks[0].on_busy: "wait": use skip, queue or replace`},
		{"concurrency", goodTask + "concurrency = 0\n", "cfg.toml:6: tasks[0].concurrency: 0: must be at least 1"},
		{"reschedule code", goodTask + "reschedule_exit_code = 300\n", "tasks[0].reschedule_exit_code: 300"},
		{"spread too long", goodTask + "spread = \"20m\"\n", "cfg.toml:6: tasks[0].spread: 20m0s: must be shorter than every"},
		{"log level", "[daemon]\nlog_level = \"loud\"\n" + goodTask, `cfg.toml:2: daemon.log_level: "loud"`},
		{"redis url", "[redis]\nurl = \"http://x\"\n" + goodTask, "cfg.toml:2: redis.url: must start with redis://"},
		{"key prefix", "[redis]\nkey_prefix = \"a{b}\"\n" + goodTask, `cfg.toml:2: redis.key_prefix: "a{b}"`},
		{"url_file missing", "[redis]\nurl_file = \"/nonexistent/redis-url\"\n" + goodTask, `cfg.toml:2: redis.url_file: open /nonexistent/redis-url: no such file or directory`},
		{"url and url_file", "[redis]\nurl = \"redis://x\"\nurl_file = \"/dev/null\"\n" + goodTask, `cfg.toml:3: redis.url_file: give url or url_file, not both`},
		{"replica_acks word", "[redis]\nreplica_acks = \"all\"\n" + goodTask, `cfg.toml:2: redis.replica_acks: want "auto" or a number of replicas (0: never wait), got the string "all"`},
		{"replica_acks negative", "[redis]\nreplica_acks = -1\n" + goodTask, `cfg.toml:2: redis.replica_acks: want "auto" or a number of replicas`},
		{"sentinel_master alone", "[redis]\nsentinel_master = \"m\"\n" + goodTask, `cfg.toml:1: redis.sentinel_addrs: sentinel_master needs the sentinels' addresses`},
		{"sentinel_addrs alone", "[redis]\nsentinel_addrs = [\"h:1\"]\n" + goodTask, `redis.sentinel_master: sentinel_addrs needs the name of the master`},
		{"sentinel address", "[redis]\nsentinel_master = \"m\"\nsentinel_addrs = [\"h:1\", \"h\"]\n" + goodTask, `cfg.toml:3: redis.sentinel_addrs: element 1, "h": want host:port`},
		{"cluster address", "[redis]\ncluster_addrs = [\"h:1\", \"h\"]\n" + goodTask, `cfg.toml:2: redis.cluster_addrs: element 1, "h": want host:port`},
		{"cluster and sentinel", "[redis]\ncluster_addrs = [\"h:1\"]\nsentinel_master = \"m\"\nsentinel_addrs = [\"h:1\"]\n" + goodTask, `redis.cluster_addrs: give cluster_addrs or sentinel_master, not both`},
		{"cluster db", "[redis]\nurl = \"redis://h:1/3\"\ncluster_addrs = [\"h:1\"]\n" + goodTask, `cfg.toml:2: redis.url: db 3: a Redis Cluster has db 0 only`},
		{"sentinel password alone", "[redis]\nsentinel_password = \"p\"\n" + goodTask, `cfg.toml:2: redis.sentinel_password: sentinel credentials without sentinel_master`},
		{"no tasks", "[daemon]\n", "cfg.toml: tasks: no [[tasks]]"},
		{"defaults name", "[defaults]\nname = \"x\"\n" + goodTask, "cfg.toml:2: defaults.name"},
		{"bad default applies to tasks", "[defaults]\nlease_ttl = \"100ms\"\n" + goodTask, "tasks[0].lease_ttl: 100ms: too short"},
		{"NUL in an entity id", goodTask + "entities = [\"ok\", \"a\\u0000b\"]\n", "cfg.toml:6: tasks[0].entities: entity 1: bad entity id: holds a NUL byte"},
		{"negative duration", goodTask + "timeout = \"-1s\"\n", `negative duration "-1s"`},
		{"entities_url not http", goodTask + "entities_url = \"ftp://x/list\"\n", "cfg.toml:6: tasks[0].entities_url: not an http:// or https:// URL"},
		{"entities_url with a password", goodTask + "entities_url = \"https://u:p@x/list\"\n", "cfg.toml:6: tasks[0].entities_url: holds a user and password"},
		{"entities_url and a list", goodTask + "entities = [\"a\"]\nentities_url = \"https://x/list\"\n", "tasks[0].entities: give only one of entities, entities_file, entities_command, entities_url"},
		{"entities_url in lines", goodTask + "entities_url = \"https://x/list\"\nentities_format = \"lines\"\n", "tasks[0].entities_format: entities_url answers JSON"},
		{"entities_headers without entities_url", goodTask + "entities_headers = { X-A = \"1\" }\n", "cfg.toml:6: tasks[0].entities_headers: only entities_url sends headers"},
		{"entities_header from an unset variable", goodTask + "entities_url = \"https://x/list\"\nentities_headers = { Authorization = \"Bearer ${TICKD_TEST_UNSET_TOKEN}\" }\n",
			"cfg.toml:7: tasks[0].entities_headers: Authorization: environment variable TICKD_TEST_UNSET_TOKEN is not set"},
		{"headers without url", goodTask + "headers = { X-A = \"1\" }\n", "cfg.toml:6: tasks[0].headers: only an HTTP action (url) sends headers"},
		{"headers not a table", httpTask + "headers = \"x\"\n", "cfg.toml:5: tasks[0].headers: want a table of strings"},
		{"header name", httpTask + "headers = { \"a b\" = \"1\" }\n", `cfg.toml:5: tasks[0].headers: "a b" is not a header name`},
		{"header set by tickd", httpTask + "headers = { content-type = \"text/plain\" }\n", `cfg.toml:5: tasks[0].headers: content-type is set by tickd`},
		{"header from an unset variable", httpTask + "headers = { Authorization = \"Bearer ${TICKD_TEST_UNSET_TOKEN}\" }\n",
			"cfg.toml:5: tasks[0].headers: Authorization: environment variable TICKD_TEST_UNSET_TOKEN is not set"},
		{"heartbeat from an unset variable", goodTask + "heartbeat_url = \"https://hc-ping.com/${TICKD_TEST_UNSET_KEY}/{task}\"\n",
			"cfg.toml:6: tasks[0].heartbeat_url: environment variable TICKD_TEST_UNSET_KEY is not set"},
		{"heartbeat not http", goodTask + "heartbeat_url = \"hc-ping.com/abc\"\n", "cfg.toml:6: tasks[0].heartbeat_url: not an http:// or https:// URL"},
		{"heartbeat with its own rid", goodTask + "heartbeat_url = \"https://hc-ping.com/abc?rid=1\"\n", "cfg.toml:6: tasks[0].heartbeat_url: give the check's URL, with its own query if it has one"},
		{"one heartbeat for two tasks", "[defaults]\nheartbeat_url = \"https://hc-ping.com/abc\"\n" + goodTask + strings.Replace(goodTask, `"sync"`, `"sync2"`, 1),
			"tasks[1].heartbeat_url: the same URL as tasks[0]'s: one check would hear both tasks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("cfg.toml", []byte(c.toml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.toml)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, c.want)
			}
		})
	}
}

// TestConfigEveryMistakeAtOnce: a file with mistakes of every kind (an
// unknown key, a wrong type, a bad duration, an invalid value, in two
// tasks and [defaults]) reports them all in one error, in line order, with
// indexed key paths; a value that could not be decoded is not reported a
// second time by validation.
func TestConfigEveryMistakeAtOnce(t *testing.T) {
	data := `[defaults]
retries = "2"

[[tasks]]
name = "a"
every = "15 minutes"
command = ["true"]
on_busy = "wait"

[[tasks]]
name = "b"
every = "1m"
comand = ["true"]
concurrency = 1.5
`
	_, err := Parse("cfg.toml", []byte(data))
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`cfg.toml:2: defaults.retries: want an integer, got the string "2"`,
		`cfg.toml:6: tasks[0].every: bad duration "15 minutes"`,
		`cfg.toml:8: tasks[0].on_busy: "wait": use skip, queue or replace`,
		`cfg.toml:13: tasks[1].comand: unknown key (did you mean "command"?)`,
		`cfg.toml:14: tasks[1].concurrency: want an integer, got the float 1.5`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if i >= len(lines) {
			break
		}
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d:\n  %s\nwant it to begin\n  %s", i, lines[i], w)
		}
	}
	for _, wrong := range []string{"missing: give every or cron", "tasks[1].command: no action"} {
		if strings.Contains(err.Error(), wrong) {
			t.Errorf("a value that did not decode is reported again by validation: %q in\n%v", wrong, err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Parse("cfg.toml", []byte(`
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
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"a.lease_ttl from [defaults]", a.LeaseTTL, 30 * time.Second},
		{"a.retries from [defaults]", a.Retries, 2},
		{"a.timezone from [defaults]", a.Location.String(), "Europe/Berlin"},
		{"a.concurrency built in", a.Concurrency, 4},
		{"a.on_busy built in", a.OnBusy, OnBusySkip},
		{"b.retries its own", b.Retries, 0},
		{"b.timezone its own", b.Location.String(), "UTC"},
		{"b.lease_ttl from [defaults]", b.LeaseTTL, 30 * time.Second},
		{"no [redis]", cfg.Redis == nil, true},
		{"daemon.shutdown_timeout built in", cfg.Daemon.ShutdownTimeout, 30 * time.Second},
		{"daemon.log_level built in", cfg.Daemon.LogLevel, "info"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if !a.singleton() {
		t.Fatal("a has no entity source: singleton")
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	cfg, err := Load(filepath.Join("..", "config.example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis != nil {
		t.Fatal("the example must run without Redis")
	}
	// Every key the config structs declare is documented in the example.
	data, _ := os.ReadFile(filepath.Join("..", "config.example.toml"))
	keys := slices.Concat(keys[Daemon](), keys[Redis](), keys[Web](), keys[Telemetry](), keys[Task](), keys[Limit]())
	if len(keys) < 25 {
		t.Fatalf("only %d keys declared: %v", len(keys), keys)
	}
	for _, key := range keys {
		if !regexp.MustCompile(`(?m)^#? ?` + key + ` +=`).Match(data) {
			t.Errorf("config.example.toml does not document %s", key)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodTask))
	f.Add([]byte("[daemon]\nlog_level = \"debug\"\n[redis]\nurl = \"redis://x\"\n" + goodTask))
	f.Add([]byte("[[tasks]]\nname = \"a\"\ncron = \"*/5 * * * *\"\ncommand = [\"x\", \"{entity}\"]\nentities = [\"1\"]\nspread = \"1m\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.toml", data)
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

// TestConfigURLFile: the Redis URL can come from a file (a systemd
// credential), so the config holds no password.
func TestConfigURLFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "redis-url")
	if err := os.WriteFile(f, []byte("redis://:s3cret@127.0.0.1:6379/2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("cfg.toml", []byte("[redis]\nurl_file = \""+f+"\"\n"+goodTask))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis.URL != "redis://:s3cret@127.0.0.1:6379/2" {
		t.Errorf("url %q, want the file's content without its newline", cfg.Redis.URL)
	}
}

// TestNewConfigURLFile: a config built in code may give url_file alone.
func TestNewConfigURLFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "redis-url")
	if err := os.WriteFile(f, []byte("redis://127.0.0.1:6379/3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	task := DefaultTask()
	task.Name, task.Every, task.Command = "t", time.Minute, []string{"true"}
	cfg, err := New(DefaultDaemon(), &Redis{URLFile: f, KeyPrefix: "tickd"}, task)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis.URL != "redis://127.0.0.1:6379/3" {
		t.Errorf("url %q, want the file's", cfg.Redis.URL)
	}
	if _, err := New(DefaultDaemon(), &Redis{URL: "redis://x:1/0", URLFile: f, KeyPrefix: "tickd"}, task); err == nil {
		t.Error("url and url_file both accepted")
	}
	// A limit New cannot declare is refused, as Parse refuses an undeclared
	// one (it was accepted, and bounded nothing).
	task.Limits = []string{"api"}
	_, err = New(DefaultDaemon(), nil, task)
	if err == nil || !strings.Contains(err.Error(), `tasks[0].limits: "api" is no [[limits]] name`) {
		t.Errorf("a task naming a limit New does not declare: %v", err)
	}
}

// replica_acks reads "auto", 0 (never) and N; the default is auto. With
// sentinels, url is optional.
func TestConfigReplicaAcksAndSentinel(t *testing.T) {
	for val, want := range map[string]driver.ReplicaAcks{"": driver.AcksAuto, `"auto"`: driver.AcksAuto, "0": driver.AcksNever, "2": 2} {
		src := "[redis]\nsentinel_master = \"m\"\nsentinel_addrs = [\"127.0.0.1:26379\"]\n"
		if val != "" {
			src += "replica_acks = " + val + "\n"
		}
		cfg, err := Parse("cfg.toml", []byte(src+goodTask))
		if err != nil {
			t.Fatalf("replica_acks = %s: %v", val, err)
		}
		expect.Equal(t, "replica_acks = "+val, cfg.Redis.ReplicaAcks, want)
		expect.Equal(t, "sentinel master", cfg.Redis.SentinelMaster, "m")
	}
}

// TestTLSPairChecked: a [web] TLS pair that cannot be read is refused,
// with the file, line and key.
func TestTLSPairChecked(t *testing.T) {
	toml := "[web]\nlisten = \"127.0.0.1:8080\"\ntls_cert_file = \"/nonexistent/c\"\ntls_key_file = \"/nonexistent/k\"\n" + goodTask
	want := "cfg.toml:3: web.tls_cert_file: open /nonexistent/c: no such file or directory"
	if _, err := Parse("cfg.toml", []byte(toml)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}

// TestEveryMistakeAtOnce: a task with a type error is still checked for a
// duplicate name, and each task's mistakes are all said, in one report.
func TestEveryMistakeAtOnce(t *testing.T) {
	toml := goodTask + "concurrency = \"8\"\n" + goodTask + "timeout = 5\n[[tasks]]\nname = \"b\"\nevery = \"15 minutes\"\ncomand = [\"x\"]\n"
	_, err := Parse("cfg.toml", []byte(toml))
	if err == nil {
		t.Fatal("taken")
	}
	for _, want := range []string{
		`cfg.toml:6: tasks[0].concurrency: want an integer, got the string "8"`,
		`cfg.toml:9: tasks[1].name: duplicate task name "sync" (also tasks[0])`,
		`cfg.toml:12: tasks[1].timeout: want a duration`,
		`cfg.toml:15: tasks[2].every: bad duration "15 minutes"`,
		`cfg.toml:16: tasks[2].comand: unknown key (did you mean "command"?)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

// cluster_addrs gives the seed nodes; url then only credentials.
func TestConfigCluster(t *testing.T) {
	cfg, err := Parse("cfg.toml", []byte("[redis]\nurl = \"redis://:pw@x:1/0\"\ncluster_addrs = [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]\n"+goodTask))
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "seed nodes", strings.Join(cfg.Redis.ClusterAddrs, " "), "127.0.0.1:7000 127.0.0.1:7001")
}
