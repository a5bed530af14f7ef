package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/tickd/tickd/tickdtype"
)

// Config is a whole tickd config file.
type Config struct {
	Daemon Daemon
	Redis  *Redis // nil: in-process leases, one replica
	Web    *Web   // nil: no console
	// Telemetry is [telemetry]: where traces go, beside the OTEL_*
	// variables. nil: only the variables say.
	Telemetry *Telemetry
	// Defaults is [defaults] over the built-in defaults: what a task that
	// gives none of its own keys gets.
	Defaults Task
	Tasks    []Task
	// Limits are the [[limits]]: budgets every replica shares.
	Limits []Limit

	// Path is the file it was read from.
	Path string
	// pos is where each key is written in it (KeyError).
	pos positions
}

// Daemon is the [daemon] table. Each key is declared once, here: its toml
// tag names it, DefaultDaemon gives its default, and config.example.toml
// documents it (TestExampleConfigIsValid).
type Daemon struct {
	// ReplicaID names this process in leases and logs. Defaults to the
	// environment's TICKD_REPLICA_ID, else POD_NAME, else hostname-pid (with
	// a random suffix in a container, where tickd is PID 1 or its child).
	ReplicaID string `toml:"replica_id"`
	// ShutdownTimeout is how long SIGTERM waits for running runs. Defaults
	// to 30s.
	ShutdownTimeout time.Duration `toml:"shutdown_timeout"`
	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string `toml:"log_level"`
	// LogFormat is auto (coloured text on a terminal, JSON otherwise), text
	// or json. Defaults to auto.
	LogFormat string `toml:"log_format"`
	// MetricsAddr, when set, serves /metrics (Prometheus), /healthz and
	// /readyz on this host:port. Defaults to "" (off).
	MetricsAddr string `toml:"metrics_addr"`
	// WatchConfig, when true, reloads the config when its file changes, by
	// the rules of SIGHUP: what a Kubernetes ConfigMap volume needs, whose
	// update swaps a symlink and signals no one. Defaults to false.
	WatchConfig bool `toml:"watch_config"`
}

// DefaultDaemon is [daemon] when nothing is given.
func DefaultDaemon() Daemon {
	return Daemon{ShutdownTimeout: 30 * time.Second, LogLevel: "info", LogFormat: "auto"}
}

// Redis is the [redis] table; leave it out for in-process leases.
type Redis struct {
	// URL is redis:// or rediss:// (TLS), with user:password@ for ACLs.
	// Defaults to redis://127.0.0.1:6379/0.
	URL string `toml:"url"`
	// KeyPrefix namespaces every key. Defaults to "tickd".
	KeyPrefix string `toml:"key_prefix"`
	// URLFile, instead of URL, names a file holding the URL, so that a
	// password stays out of the config (which the service user must be able
	// to read): a systemd credential (LoadCredential=), or a file of mode
	// 0600. Read when the config is loaded. Defaults to "" (use URL).
	URLFile string `toml:"url_file"`
	// SentinelMaster, with SentinelAddrs, connects through Redis Sentinel to
	// the primary of that name, and follows it across failovers. URL then
	// gives only the credentials, TLS and the db; its host is not used.
	SentinelMaster string `toml:"sentinel_master"`
	// SentinelAddrs are the sentinels' host:port addresses.
	SentinelAddrs []string `toml:"sentinel_addrs"`
	// SentinelUsername and SentinelPassword authenticate to the sentinels,
	// where they require it.
	SentinelUsername string `toml:"sentinel_username"`
	SentinelPassword string `toml:"sentinel_password"`
	// ClusterAddrs, when set, are seed nodes (host:port) of a Redis Cluster:
	// go-redis's cluster client finds every shard from them and follows
	// failovers. URL then gives only the credentials and TLS; the db must
	// be 0 (a cluster has no other).
	ClusterAddrs []string `toml:"cluster_addrs"`
	// ReplicaAcks is how many replicas must have a lease grant or renewal
	// before it is trusted: "auto" (default; every replica the primary
	// reports online, none if it has none), a number, or 0 (never wait).
	ReplicaAcks tickdtype.ReplicaAcks `toml:"replica_acks"`
}

// Web is the [web] table: the console (package console). Leave it out for
// none; `tickd web` serves it alone.
type Web struct {
	// Listen is the console's host:port. Required.
	Listen string `toml:"listen"`
	// HtpasswdFile names a file of user:bcrypt-hash lines (htpasswd -B).
	// Required unless Listen is a loopback address; without it, the
	// console is read-only (every local account reaches a loopback
	// address), unless InsecureLocalAdmin.
	HtpasswdFile string `toml:"htpasswd_file"`
	// InsecureLocalAdmin, without HtpasswdFile, makes anyone who reaches
	// the loopback address an admin (every account of the host: they may
	// trigger, pause and unlock). Defaults to false: read-only.
	InsecureLocalAdmin bool `toml:"insecure_local_admin"`
	// Admins may trigger, pause, resume and unlock; the other users only
	// look. Defaults to none.
	Admins []string `toml:"admins"`
	// TLSCertFile and TLSKeyFile, together, serve HTTPS.
	TLSCertFile string `toml:"tls_cert_file"`
	TLSKeyFile  string `toml:"tls_key_file"`
	// Refresh is how often the pages refresh themselves (a viewer may
	// pause it). Defaults to 5s.
	Refresh time.Duration `toml:"refresh"`
	// Hosts are the Host names a console without users answers besides
	// loopback ones (localhost, 127.0.0.1, [::1]): a page elsewhere whose
	// name resolves to 127.0.0.1 (DNS rebinding) is refused. Defaults to
	// none.
	Hosts []string `toml:"hosts"`
	// TrustedProxies are the networks (CIDR) whose X-Forwarded-For is
	// believed: the login limiter counts per client, and behind a proxy
	// the client is the address the proxy saw. Defaults to none.
	TrustedProxies []string `toml:"trusted_proxies"`
	// MaxConnections caps the console's open connections, well below the
	// daemon's file descriptors, so that clients can never take what runs
	// need. Defaults to 64.
	MaxConnections int `toml:"max_connections"`
	// BasePath is the path the console is served under ("/tickd"), for a
	// reverse proxy that serves it at a path: every link, form, asset and
	// redirect stays under it. Defaults to "" (the root).
	BasePath string `toml:"base_path"`
}

// Telemetry is the [telemetry] table: what the standard OTEL_* variables
// do not say about tracing (they say the rest: OTEL_TRACES_SAMPLER and
// _ARG, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_EXPORTER_OTLP_HEADERS…).
type Telemetry struct {
	// Endpoint is the base URL of an OTLP/HTTP collector
	// ("http://collector:4318"): traces go to Endpoint + "/v1/traces". It
	// wins over OTEL_EXPORTER_OTLP_ENDPOINT. Defaults to "": the variables
	// say, and with none of them set, tickd traces nothing.
	Endpoint string `toml:"endpoint"`
	// RunSpans is how many runs of a tick one replica's fan-out span
	// parents; the runs past it get traces of their own, linked to it.
	// Defaults to 1000.
	RunSpans int `toml:"run_spans"`
}

// defaultRedis is [redis] when the table is given with no keys.
func defaultRedis() Redis { return Redis{URL: "redis://127.0.0.1:6379/0", KeyPrefix: "tickd"} }

// Error is one problem in a config file, at a line where known.
type Error struct {
	File string
	Line int    // 0: unknown
	Key  string // dotted path, tasks[2].every
	Msg  string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return loc + ": " + e.Msg
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
}

// Load reads and validates a config file. Every problem is reported
// (errors.Join of *Error), not only the first.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// LoadConnection loads a config for a command that needs only its [redis]
// table (tickd lock): [[tasks]] may be left out; any given are checked.
func LoadConnection(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, data, false)
}

// Parse decodes and validates a config; path names it in errors.
// Every mistake of the file is reported together (errors.Join of
// *Error, in line order), those found while decoding too.
func Parse(path string, data []byte) (*Config, error) { return parseConfig(path, data, true) }

func parseConfig(path string, data []byte, needTasks bool) (*Config, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{File: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
		}
		return nil, &Error{File: path, Msg: err.Error()}
	}
	d := newDecoder(path, data)
	cfg := &Config{Path: path, Daemon: DefaultDaemon(), Defaults: DefaultTask()}
	defaultsGiven, tasksRaw, redisGiven := decodeTables(d, raw, cfg)
	if l, ok := raw["limits"]; ok {
		cfg.Limits = decodeLimits(d, l)
	}
	validateDaemon(d, cfg.Daemon)
	if cfg.Redis != nil {
		validateRedis(d, cfg.Redis, redisGiven["url"])
	}
	if cfg.Web != nil {
		validateWeb(d, cfg.Web)
	}
	if cfg.Telemetry != nil {
		validateTelemetry(d, cfg.Telemetry)
	}
	if defaultsGiven["name"] {
		d.bad("defaults.name", "a name is per task; it cannot have a default")
	}
	if len(tasksRaw) == 0 && needTasks {
		d.bad("tasks", "no [[tasks]]: nothing to schedule")
	}
	cfg.Tasks = decodeTasks(d, tasksRaw, cfg.Defaults, defaultsGiven)
	checkTaskLimits(d, cfg, tasksRaw, cfg.Defaults.Limits)
	if err := d.err(); err != nil {
		return nil, err
	}
	cfg.pos = d.pos
	return cfg, nil
}

// KeyError is a mistake about key (a dotted path: "web.htpasswd_file")
// found after the config was read, by what uses it (the console reads its
// users' file): said as every config error is, with the file and the line
// the key is written on.
func (c *Config) KeyError(key, format string, args ...any) *Error {
	return &Error{File: c.Path, Line: c.pos.line(key), Key: key, Msg: fmt.Sprintf(format, args...)}
}

// decodeTables decodes [daemon], [redis] and [defaults] into cfg, and
// returns the keys [defaults] gives, the [[tasks]] tables, still raw, and
// the keys [redis] gives.
func decodeTables(d *decoder, raw map[string]any, cfg *Config) (defaultsGiven keySet, tasksRaw []map[string]any, redisGiven keySet) {
	for _, k := range sortedKeys(raw) {
		switch k {
		case "daemon":
			d.table(k, raw[k], &cfg.Daemon)
		case "redis":
			r := defaultRedis()
			redisGiven = d.table(k, raw[k], &r)
			cfg.Redis = &r
		case "telemetry":
			cfg.Telemetry = &Telemetry{}
			d.table(k, raw[k], cfg.Telemetry)
		case "defaults":
			defaultsGiven = d.table(k, raw[k], &cfg.Defaults)
		case "web":
			w := Web{Refresh: 5 * time.Second, MaxConnections: 64}
			d.table(k, raw[k], &w)
			cfg.Web = &w
		case "limits": // decoded after: a task names them
		case "tasks":
			ts, ok := raw[k].([]map[string]any)
			if !ok {
				d.bad(k, "want [[tasks]] tables, got %s", describe(raw[k]))
				d.failed[k] = true
				continue
			}
			tasksRaw = ts
		default:
			d.unknown(k, raw[k], topLevel)
		}
	}
	return defaultsGiven, tasksRaw, redisGiven
}

// decodeTasks decodes each [[tasks]] table over the defaults and returns
// the valid tasks; the others are reported.
func decodeTasks(d *decoder, tasksRaw []map[string]any, defaults Task, defaultsGiven keySet) []Task {
	var out []Task
	seen := map[string]int{}
	for i, tr := range tasksRaw {
		key := fmt.Sprintf("tasks[%d]", i)
		t := defaults
		given := d.table(key, tr, &t)
		for k := range defaultsGiven {
			if !given[k] {
				given[k] = true
				if d.failed["defaults."+k] {
					d.failed[key+"."+k] = true // reported at [defaults]
				}
			}
		}
		if t, ok := validTask(d, seen, i, t, given); ok {
			out = append(out, t)
		}
	}
	return out
}

// validTask validates tasks[i] and checks that its name is new (seen maps
// the names so far to their index).
func validTask(d *decoder, seen map[string]int, i int, t Task, given keySet) (Task, bool) {
	key := fmt.Sprintf("tasks[%d]", i)
	ok := validateTask(d, key, &t, given)
	// A name is checked for duplicates whatever else is wrong with its
	// task, so that every mistake of a file is said at once.
	if t.Name != "" && !d.failed[key+".name"] {
		if j, dup := seen[t.Name]; dup {
			d.bad(key+".name", "duplicate task name %q (also tasks[%d])", t.Name, j)
			return t, false
		}
		seen[t.Name] = i
	}
	if t.HeartbeatURL != "" && !d.failed[key+".heartbeat_url"] {
		if j, dup := d.beats[t.HeartbeatURL]; dup {
			d.bad(key+".heartbeat_url", "the same URL as tasks[%d]'s: one check would hear both tasks, and miss either's silence; put {task} in it, or give each its own", j)
			return t, false
		}
		d.beats[t.HeartbeatURL] = i
	}
	return t, ok
}

// New builds a config in code, for a program that embeds tickd: each
// task is DefaultTask() with the keys the program sets, validated as a
// file's tasks are (its Location and Schedule derived). r nil means
// in-process leases. Errors name the key as tasks[i].key of "(code)".
func New(daemon Daemon, r *Redis, tasks ...Task) (*Config, error) {
	d := newDecoder("(code)", nil)
	cfg := &Config{Path: "(code)", Daemon: daemon, Redis: r, Defaults: DefaultTask()}
	validateDaemon(d, daemon)
	if r != nil {
		validateRedis(d, r, r.URL != "" && r.URL != defaultRedis().URL) // a URL of its own beside url_file
	}
	if len(tasks) == 0 {
		d.bad("tasks", "no tasks: nothing to schedule")
	}
	seen := map[string]int{}
	for i, t := range tasks {
		if len(t.Limits) > 0 {
			// New declares no [[limits]]: a name would be a limit nothing
			// bounds, as Parse refuses it.
			d.bad(fmt.Sprintf("tasks[%d].limits", i), "%q is no [[limits]] name: a config built by New declares none (declare them in a file, config.Parse)", t.Limits[0])
		}
		if t, ok := validTask(d, seen, i, t, keySet{"every": t.Every != 0}); ok {
			cfg.Tasks = append(cfg.Tasks, t)
		}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// topLevel names the tables of a config file, for "did you mean".
var topLevel = []string{"daemon", "redis", "web", "telemetry", "defaults", "tasks", "limits"}

// MaxLeaseTTL is the longest lease_ttl of the config's tasks.
func (c *Config) MaxLeaseTTL() time.Duration {
	m := time.Duration(0)
	for _, t := range c.Tasks {
		m = max(m, t.LeaseTTL)
	}
	return m
}

// Task returns the task named name.
func (c *Config) Task(name string) (*Task, bool) {
	for i := range c.Tasks {
		if c.Tasks[i].Name == name {
			return &c.Tasks[i], true
		}
	}
	return nil, false
}
