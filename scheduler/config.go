package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/tasks"
)

// Config is a whole tickd config file.
type Config struct {
	Daemon Daemon
	Redis  *Redis // nil: in-process leases, one replica
	// Defaults is [defaults] over the built-in defaults: what a task that
	// gives none of its own keys gets.
	Defaults Task
	Tasks    []Task

	// Path is the file it was read from.
	Path string
}

// Daemon is the [daemon] table. Each key is declared once, here: its toml
// tag names it, DefaultDaemon gives its default, and config.example.toml
// documents it (TestExampleConfigDocumentsEveryKey).
type Daemon struct {
	// ReplicaID names this process in leases and logs. Defaults to
	// hostname-pid.
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
	ReplicaAcks lease.ReplicaAcks `toml:"replica_acks"`
}

// DefaultRedis is [redis] when the table is given with no keys.
func DefaultRedis() Redis { return Redis{URL: "redis://127.0.0.1:6379/0", KeyPrefix: "tickd"} }

// OnBusy says what a tick does for an entity whose lease is held.
type OnBusy string

// The values of on_busy.
const (
	OnBusySkip  OnBusy = "skip"  // skip the entity this tick
	OnBusyQueue OnBusy = "queue" // run once more right after the holder ends
)

// Task is one [[tasks]] entry with [defaults] and the built-in defaults
// applied, validated. Each key is declared once, here: its toml tag names it,
// DefaultTask gives its default, [defaults] and then the task's own table
// are decoded over that, and config.example.toml documents it.
type Task struct {
	// Name identifies the task in keys, logs and commands: letters, digits
	// and . _ - (at most 200). Required; it has no default.
	Name string `toml:"name"`
	// Every ticks at wall-clock multiples of the interval in Timezone,
	// whole seconds. One of Every and Cron is required.
	Every time.Duration `toml:"every"`
	// Cron is a cron expression: 5 fields, 6 with seconds first, @hourly…
	Cron string `toml:"cron"`
	// Timezone is an IANA zone name. Defaults to UTC.
	Timezone string `toml:"timezone"`
	// Spread spreads entity start times over this window, by a hash of the
	// entity. Defaults to 0s (off).
	Spread time.Duration `toml:"spread"`

	// At most one entity source; none makes a singleton task.
	Entities        []string `toml:"entities"`
	EntitiesFile    string   `toml:"entities_file"`
	EntitiesCommand []string `toml:"entities_command"`
	// EntitiesTimeout stops an entities_command. Defaults to 1m.
	EntitiesTimeout time.Duration `toml:"entities_timeout"`

	// Exactly one action.
	Command []string `toml:"command"`
	URL     string   `toml:"url"`
	Handler string   `toml:"handler"`
	// Headers are the HTTP action's request headers. ${NAME} in a value is
	// the environment variable NAME, read when the config is loaded (a
	// secret stays out of the file); an unset one is an error. Defaults to
	// none.
	Headers map[string]string `toml:"headers"`

	// Concurrency is how many runs of this task go on at once on this
	// replica. Defaults to 4.
	Concurrency int `toml:"concurrency"`
	// Timeout stops a run that goes on longer. Defaults to 1h.
	Timeout time.Duration `toml:"timeout"`
	// WarnAfter logs one warning when a run is still going. Defaults to 0s
	// (off).
	WarnAfter time.Duration `toml:"warn_after"`
	// LeaseTTL is renewed every LeaseTTL/3 while a run goes on. Defaults to
	// 1m; at least lease.MinTTL.
	LeaseTTL time.Duration `toml:"lease_ttl"`
	// OnBusy defaults to skip.
	OnBusy OnBusy `toml:"on_busy"`
	// RescheduleExitCode is the exec exit status that means "more work
	// left, run me again". Defaults to 75 (EX_TEMPFAIL).
	RescheduleExitCode int `toml:"reschedule_exit_code"`
	// RescheduleDelay is how soon a rescheduled run may start. Defaults to
	// 0s.
	RescheduleDelay time.Duration `toml:"reschedule_delay"`
	// MaxReschedules is how many consecutive reschedules run before the
	// next tick is waited for. Defaults to 100.
	MaxReschedules int `toml:"max_reschedules"`
	// Retries is how many times a failed run is retried, with backoff.
	// Defaults to 0.
	Retries int `toml:"retries"`
	// CatchUp runs the latest missed tick once, at start or after an
	// outage, if it is at most this old. Defaults to 0s (off).
	CatchUp time.Duration `toml:"catch_up"`

	// Derived by validation.
	Location *time.Location `toml:"-"`
	Schedule Schedule       `toml:"-"`
}

// DefaultTask is every per-task key's built-in default. [defaults]
// overrides it, and a task's own keys override [defaults].
func DefaultTask() Task {
	return Task{
		Timezone:           "UTC",
		EntitiesTimeout:    time.Minute,
		Concurrency:        4,
		Timeout:            time.Hour,
		LeaseTTL:           time.Minute,
		OnBusy:             OnBusySkip,
		RescheduleExitCode: 75,
		MaxReschedules:     100,
	}
}

// LateLimit is how late a tick may still start its runs: the catch-up
// window, and at least 10s (a timer woken late, a Redis that answered late).
func (t *Task) LateLimit() time.Duration { return max(t.CatchUp, 10*time.Second) }

// Singleton reports whether the task has no entity source: it runs for one
// implicit entity, its own name.
func (t *Task) Singleton() bool {
	return t.Entities == nil && t.EntitiesFile == "" && t.EntitiesCommand == nil
}

// Source is where the task's entities come from; a singleton's one entity
// is its name. log (may be nil) hears about skipped bad lines.
func (t *Task) Source(log *slog.Logger) tasks.Source {
	switch {
	case t.Entities != nil:
		return tasks.Static(t.Entities)
	case t.EntitiesFile != "":
		return tasks.File{Path: t.EntitiesFile, Log: log}
	case t.EntitiesCommand != nil:
		return tasks.Command{Argv: t.EntitiesCommand, Timeout: t.EntitiesTimeout, Log: log}
	}
	return tasks.Static{t.Name}
}

// ConfigError is one problem in a config file, at a line where known.
type ConfigError struct {
	File string
	Line int    // 0: unknown
	Key  string // dotted path, tasks[2].every
	Msg  string
}

func (e *ConfigError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return loc + ": " + e.Msg
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
}

// LoadConfig reads and validates a config file. Every problem is reported
// (errors.Join of *ConfigError), not only the first.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes and validates a config; path names it in errors.
// Every mistake of the file is reported together (errors.Join of
// *ConfigError, in line order), those found while decoding too.
func ParseConfig(path string, data []byte) (*Config, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &ConfigError{File: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
		}
		return nil, &ConfigError{File: path, Msg: err.Error()}
	}
	d := newDecoder(path, data)
	cfg := &Config{Path: path, Daemon: DefaultDaemon(), Defaults: DefaultTask()}
	defaultsGiven, tasksRaw, redisGiven := decodeTables(d, raw, cfg)
	validateDaemon(d, cfg.Daemon)
	if cfg.Redis != nil {
		validateRedis(d, cfg.Redis, redisGiven["url"])
	}
	if defaultsGiven["name"] {
		d.bad("defaults.name", "a name is per task; it cannot have a default")
	}
	if len(tasksRaw) == 0 {
		d.bad("tasks", "no [[tasks]]: nothing to schedule")
	}
	cfg.Tasks = decodeTasks(d, tasksRaw, cfg.Defaults, defaultsGiven)
	if err := d.err(); err != nil {
		return nil, err
	}
	return cfg, nil
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
			r := DefaultRedis()
			redisGiven = d.table(k, raw[k], &r)
			cfg.Redis = &r
		case "defaults":
			defaultsGiven = d.table(k, raw[k], &cfg.Defaults)
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
	if !validateTask(d, key, &t, given) {
		return t, false
	}
	if j, dup := seen[t.Name]; dup {
		d.bad(key+".name", "duplicate task name %q (also tasks[%d])", t.Name, j)
		return t, false
	}
	seen[t.Name] = i
	return t, true
}

// NewConfig builds a config in code, for a program that embeds tickd: each
// task is DefaultTask() with the keys the program sets, validated as a
// file's tasks are (its Location and Schedule derived). r nil means
// in-process leases. Errors name the key as tasks[i].key of "(code)".
func NewConfig(daemon Daemon, r *Redis, tasks ...Task) (*Config, error) {
	d := newDecoder("(code)", nil)
	cfg := &Config{Path: "(code)", Daemon: daemon, Redis: r, Defaults: DefaultTask()}
	validateDaemon(d, daemon)
	if r != nil {
		validateRedis(d, r, r.URL != "" && r.URL != DefaultRedis().URL) // a URL of its own beside url_file
	}
	if len(tasks) == 0 {
		d.bad("tasks", "no tasks: nothing to schedule")
	}
	seen := map[string]int{}
	for i, t := range tasks {
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
var topLevel = []string{"daemon", "redis", "defaults", "tasks"}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func validateDaemon(d *decoder, dm Daemon) {
	switch dm.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		d.bad("daemon.log_level", "%q: use debug, info, warn or error", dm.LogLevel)
	}
	switch dm.LogFormat {
	case "auto", "text", "json":
	default:
		d.bad("daemon.log_format", "%q: use auto, text or json", dm.LogFormat)
	}
	if a := dm.MetricsAddr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			d.bad("daemon.metrics_addr", "%q: want host:port, e.g. \"127.0.0.1:9464\"", a)
		}
	}
}

func validateRedis(d *decoder, r *Redis, urlGiven bool) {
	if r.URLFile != "" {
		if urlGiven {
			d.bad("redis.url_file", "give url or url_file, not both")
		}
		b, err := os.ReadFile(r.URLFile)
		if err != nil {
			d.bad("redis.url_file", "%v", err)
			return
		}
		r.URL = strings.TrimSpace(string(b))
	}
	if !strings.HasPrefix(r.URL, "redis://") && !strings.HasPrefix(r.URL, "rediss://") && !strings.HasPrefix(r.URL, "unix://") {
		d.bad("redis.url", "must start with redis://, rediss:// or unix://")
	}
	if !lease.ValidPrefix(r.KeyPrefix) {
		d.bad("redis.key_prefix", "%q: use letters, digits and . _ - : only", r.KeyPrefix)
	}
	switch {
	case r.SentinelMaster != "" && len(r.SentinelAddrs) == 0:
		d.bad("redis.sentinel_addrs", "sentinel_master needs the sentinels' addresses, e.g. [\"10.0.0.1:26379\", \"10.0.0.2:26379\"]")
	case r.SentinelMaster == "" && len(r.SentinelAddrs) > 0:
		d.bad("redis.sentinel_master", "sentinel_addrs needs the name of the master the sentinels monitor")
	}
	for i, a := range r.SentinelAddrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			d.bad("redis.sentinel_addrs", "element %d, %q: want host:port, e.g. \"10.0.0.1:26379\"", i, a)
		}
	}
	if (r.SentinelUsername != "" || r.SentinelPassword != "") && r.SentinelMaster == "" {
		d.bad("redis.sentinel_password", "sentinel credentials without sentinel_master")
	}
	validateCluster(d, r)
}

func validateCluster(d *decoder, r *Redis) {
	if len(r.ClusterAddrs) == 0 {
		return
	}
	if r.SentinelMaster != "" {
		d.bad("redis.cluster_addrs", "give cluster_addrs or sentinel_master, not both")
	}
	for i, a := range r.ClusterAddrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			d.bad("redis.cluster_addrs", "element %d, %q: want host:port, e.g. \"10.0.0.1:6379\"", i, a)
		}
	}
	if ro, err := redis.ParseURL(r.URL); err == nil && ro.DB != 0 {
		d.bad("redis.url", "db %d: a Redis Cluster has db 0 only (end the url with /0 or nothing)", ro.DB)
	}
}

// validateTask checks one task (key is "tasks[i]"; given, the keys written
// in its table or in [defaults]) and derives its Location and Schedule. It
// reports whether the task is valid.
func validateTask(d *decoder, key string, t *Task, given keySet) bool {
	before := len(d.errs)
	bad := func(k, format string, args ...any) { d.bad(key+"."+k, format, args...) }
	validateName(t, bad)
	validateSchedule(t, given, bad)
	validateAction(t, bad)
	validateSource(t, bad)
	validateLimits(t, bad)
	return len(d.errs) == before && !d.failedUnder(key)
}

type badFunc func(key, format string, args ...any)

func validateName(t *Task, bad badFunc) {
	switch {
	case t.Name == "":
		bad("name", "missing: every task needs a name")
	case !nameRE.MatchString(t.Name) || len(t.Name) > 200:
		bad("name", "%q: use letters, digits and . _ - (at most 200)", t.Name)
	}
}

// validateSchedule checks the schedule keys: exactly one of every and cron,
// from the task or [defaults], in a known timezone.
func validateSchedule(t *Task, given keySet, bad badFunc) {
	loc, err := time.LoadLocation(t.Timezone)
	if err != nil || t.Timezone == "" || t.Timezone == "Local" {
		bad("timezone", "unknown timezone %q (use an IANA name such as \"Europe/Berlin\")", t.Timezone)
		loc = time.UTC
	}
	t.Location = loc
	switch {
	case t.Every > 0 && t.Cron != "":
		bad("every", "both every and cron given: choose one")
	case t.Cron != "":
		s, err := ParseCron(t.Cron, loc)
		if err != nil {
			bad("cron", "%v", err)
		}
		t.Schedule = s
	case t.Every > 0:
		if t.Every < time.Second || t.Every%time.Second != 0 {
			bad("every", "%v: must be a whole number of seconds, at least 1s", t.Every)
		}
		t.Schedule = Every{Interval: t.Every, Location: loc}
	case given["every"]:
		bad("every", "must be more than 0s")
	default:
		bad("every", "missing: give every or cron")
	}
	if t.Spread > 0 && t.Every > 0 && t.Spread >= t.Every {
		bad("spread", "%v: must be shorter than every (%v)", t.Spread, t.Every)
	}
}

// validateAction checks that exactly one action is given, and well.
func validateAction(t *Task, bad badFunc) {
	switch count(t.Command != nil, t.URL != "", t.Handler != "") {
	case 0:
		bad("command", "no action: give one of command, url, handler")
	case 1:
	default:
		bad("command", "give only one of command, url, handler")
	}
	if t.Command != nil && (len(t.Command) == 0 || t.Command[0] == "") {
		bad("command", "empty argv")
	}
	if t.URL != "" && !strings.HasPrefix(t.URL, "http://") && !strings.HasPrefix(t.URL, "https://") {
		bad("url", "%q: must be http:// or https://", t.URL)
	}
	validateHeaders(t, bad)
	if t.RescheduleExitCode == 0 && t.Command != nil {
		bad("reschedule_exit_code", "0 means success; use another status (0 is not allowed)")
	}
}

// envRef is a reference to an environment variable in a header value.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// headerName is an HTTP header name (RFC 9110's token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// validateHeaders checks the HTTP headers and puts the environment's values
// in place of ${NAME}. Errors name the header and the variable, never a
// value.
func validateHeaders(t *Task, bad badFunc) {
	if len(t.Headers) > 0 && t.URL == "" {
		bad("headers", "only an HTTP action (url) sends headers")
	}
	expanded := make(map[string]string, len(t.Headers)) // [defaults]' map is shared by its tasks
	defer func() {
		if t.Headers != nil {
			t.Headers = expanded
		}
	}()
	for _, name := range slices.Sorted(maps.Keys(t.Headers)) {
		v := t.Headers[name]
		if !headerName.MatchString(name) {
			bad("headers", "%q is not a header name", name)
			continue
		}
		if strings.EqualFold(name, "Content-Type") || strings.EqualFold(name, "Host") || strings.EqualFold(name, "Content-Length") {
			bad("headers", "%s is set by tickd", name)
			continue
		}
		var missing []string
		v = envRef.ReplaceAllStringFunc(v, func(ref string) string {
			env := ref[2 : len(ref)-1]
			val, ok := os.LookupEnv(env)
			if !ok {
				missing = append(missing, env)
			}
			return val
		})
		if len(missing) > 0 {
			bad("headers", "%s: environment variable %s is not set", name, strings.Join(missing, ", "))
			continue
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			bad("headers", "%s: the value holds a line break or NUL", name)
			continue
		}
		expanded[name] = v
	}
}

// validateSource checks the entity source: at most one, and its ids.
func validateSource(t *Task, bad badFunc) {
	if count(t.Entities != nil, t.EntitiesFile != "", t.EntitiesCommand != nil) > 1 {
		bad("entities", "give only one of entities, entities_file, entities_command")
	}
	if t.EntitiesCommand != nil && (len(t.EntitiesCommand) == 0 || t.EntitiesCommand[0] == "") {
		bad("entities_command", "empty argv")
	}
	for j, id := range t.Entities {
		if id == "" {
			bad("entities", "entity %d is empty", j)
		} else if err := tasks.CheckID(id); err != nil {
			bad("entities", "entity %d: %v", j, err)
		}
	}
}

// validateLimits checks the keys that bound runs.
func validateLimits(t *Task, bad badFunc) {
	if t.Concurrency < 1 {
		bad("concurrency", "%d: must be at least 1", t.Concurrency)
	}
	if t.LeaseTTL < lease.MinTTL {
		bad("lease_ttl", "%v: too short to renew (every lease_ttl/3) before it expires; use at least %v", t.LeaseTTL, lease.MinTTL)
	}
	if t.Timeout <= 0 {
		bad("timeout", "must be more than 0s")
	}
	if t.OnBusy != OnBusySkip && t.OnBusy != OnBusyQueue {
		bad("on_busy", "%q: use %s or %s", t.OnBusy, OnBusySkip, OnBusyQueue)
	}
	if t.RescheduleExitCode < 0 || t.RescheduleExitCode > 255 {
		bad("reschedule_exit_code", "%d: an exit status is 0..255", t.RescheduleExitCode)
	}
	for k, n := range map[string]int{"max_reschedules": t.MaxReschedules, "retries": t.Retries} {
		if n < 0 {
			bad(k, "must not be negative")
		}
	}
}

// count is how many of bs are true.
func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

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
