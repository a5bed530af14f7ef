package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/tasks"
)

// Config is a whole tickd config file.
type Config struct {
	Daemon   Daemon
	Redis    *Redis // nil: in-process leases, one replica
	Defaults TaskSpec
	Tasks    []Task

	// Path is the file it was read from.
	Path string
}

// Daemon is the [daemon] table.
type Daemon struct {
	// ReplicaID names this process in leases and logs. Defaults to
	// hostname-pid.
	ReplicaID string `toml:"replica_id"`
	// ShutdownTimeout is how long SIGTERM waits for running runs. Defaults
	// to 30s.
	ShutdownTimeout Duration `toml:"shutdown_timeout"`
	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string `toml:"log_level"`
	// LogFormat is auto (coloured text on a terminal, JSON otherwise), text
	// or json. Defaults to auto.
	LogFormat string `toml:"log_format"`
	// MetricsAddr, when set, serves /metrics (Prometheus), /healthz and
	// /readyz on this host:port. Defaults to "" (off).
	MetricsAddr string `toml:"metrics_addr"`
}

// Redis is the [redis] table.
type Redis struct {
	// URL is redis:// or rediss:// (TLS), with user:password@ for ACLs.
	// Defaults to redis://127.0.0.1:6379/0.
	URL string `toml:"url"`
	// KeyPrefix namespaces every key. Defaults to "tickd".
	KeyPrefix string `toml:"key_prefix"`
}

// TaskSpec is one [[tasks]] entry, or [defaults], as written: nil means
// "not given here".
type TaskSpec struct {
	Name            *string   `toml:"name"`
	Every           *Duration `toml:"every"`
	Cron            *string   `toml:"cron"`
	Timezone        *string   `toml:"timezone"`
	Spread          *Duration `toml:"spread"`
	Entities        *[]string `toml:"entities"`
	EntitiesFile    *string   `toml:"entities_file"`
	EntitiesCommand *[]string `toml:"entities_command"`
	EntitiesTimeout *Duration `toml:"entities_timeout"`
	Command         *[]string `toml:"command"`
	URL             *string   `toml:"url"`
	Handler         *string   `toml:"handler"`

	Concurrency        *int      `toml:"concurrency"`
	Timeout            *Duration `toml:"timeout"`
	WarnAfter          *Duration `toml:"warn_after"`
	LeaseTTL           *Duration `toml:"lease_ttl"`
	OnBusy             *string   `toml:"on_busy"`
	RescheduleExitCode *int      `toml:"reschedule_exit_code"`
	RescheduleDelay    *Duration `toml:"reschedule_delay"`
	MaxReschedules     *int      `toml:"max_reschedules"`
	Retries            *int      `toml:"retries"`
	CatchUp            *Duration `toml:"catch_up"`
}

// Task is a task with every default applied and validated.
type Task struct {
	Name     string
	Every    time.Duration // 0 when Cron is used
	Cron     string
	Location *time.Location
	Spread   time.Duration
	Schedule Schedule

	Entities        []string
	EntitiesFile    string
	EntitiesCommand []string
	EntitiesTimeout time.Duration
	Command         []string
	URL             string
	Handler         string

	Concurrency        int
	Timeout            time.Duration
	WarnAfter          time.Duration
	LeaseTTL           time.Duration
	OnBusy             string // skip | queue
	RescheduleExitCode int
	RescheduleDelay    time.Duration
	MaxReschedules     int
	Retries            int
	CatchUp            time.Duration
}

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

// Duration is a time.Duration written as a Go duration string ("90s", "15m").
type Duration struct{ time.Duration }

// UnmarshalText parses a duration; negative ones are refused.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (use e.g. \"90s\", \"15m\", \"2h\")", b)
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", b)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration back.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Built-in defaults of every per-task key. [defaults] overrides them, and a
// task's own keys override [defaults].
var builtin = Task{
	Location:           time.UTC,
	EntitiesTimeout:    time.Minute,
	Concurrency:        4,
	Timeout:            time.Hour,
	LeaseTTL:           time.Minute,
	OnBusy:             "skip",
	RescheduleExitCode: 75,
	MaxReschedules:     100,
}

// DefaultDaemon is [daemon] when nothing is given.
func DefaultDaemon() Daemon {
	return Daemon{ShutdownTimeout: Duration{30 * time.Second}, LogLevel: "info", LogFormat: "auto"}
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

type rawConfig struct {
	Daemon   *Daemon    `toml:"daemon"`
	Redis    *Redis     `toml:"redis"`
	Defaults TaskSpec   `toml:"defaults"`
	Tasks    []TaskSpec `toml:"tasks"`
}

var lineRE = regexp.MustCompile(`^toml: line (\d+)`)

// ParseConfig decodes and validates a config; path names it in errors.
func ParseConfig(path string, data []byte) (*Config, error) {
	raw := rawConfig{}
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &ConfigError{File: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
		}
		// Type errors carry "toml: line N (last key "k"): msg".
		msg := err.Error()
		ce := &ConfigError{File: path, Msg: msg}
		if m := lineRE.FindStringSubmatch(msg); m != nil {
			fmt.Sscan(m[1], &ce.Line) //nolint:errcheck
			if i := strings.Index(msg, "): "); i >= 0 {
				ce.Msg = msg[i+3:]
			}
			if i, j := strings.Index(msg, `key "`), strings.Index(msg, `"):`); i >= 0 && j > i {
				ce.Key = msg[i+5 : j]
			}
		}
		return nil, ce
	}
	pos := indexPositions(data)
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{File: path, Line: pos.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for _, k := range md.Undecoded() {
		key := pos.indexed(k)
		bad(key, "unknown key")
	}
	cfg := &Config{Path: path, Daemon: DefaultDaemon(), Redis: raw.Redis, Defaults: raw.Defaults}
	if raw.Daemon != nil {
		d := raw.Daemon
		if d.ShutdownTimeout.Duration == 0 && !md.IsDefined("daemon", "shutdown_timeout") {
			d.ShutdownTimeout = cfg.Daemon.ShutdownTimeout
		}
		if d.LogLevel == "" {
			d.LogLevel = "info"
		}
		if d.LogFormat == "" {
			d.LogFormat = "auto"
		}
		cfg.Daemon = *d
	}
	switch cfg.Daemon.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("daemon.log_level", "%q: use debug, info, warn or error", cfg.Daemon.LogLevel)
	}
	switch cfg.Daemon.LogFormat {
	case "auto", "text", "json":
	default:
		bad("daemon.log_format", "%q: use auto, text or json", cfg.Daemon.LogFormat)
	}
	if a := cfg.Daemon.MetricsAddr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("daemon.metrics_addr", "%q: want host:port, e.g. \"127.0.0.1:9464\"", a)
		}
	}
	if r := cfg.Redis; r != nil {
		if r.URL == "" {
			r.URL = "redis://127.0.0.1:6379/0"
		}
		if r.KeyPrefix == "" {
			r.KeyPrefix = "tickd"
		}
		if !strings.HasPrefix(r.URL, "redis://") && !strings.HasPrefix(r.URL, "rediss://") && !strings.HasPrefix(r.URL, "unix://") {
			bad("redis.url", "must start with redis://, rediss:// or unix://")
		}
		if !lease.ValidPrefix(r.KeyPrefix) {
			bad("redis.key_prefix", "%q: use letters, digits and . _ - : only", r.KeyPrefix)
		}
	}
	if raw.Defaults.Name != nil {
		bad("defaults.name", "a name is per task; it cannot have a default")
	}
	if len(raw.Tasks) == 0 {
		bad("tasks", "no [[tasks]]: nothing to schedule")
	}
	seen := map[string]int{}
	for i, spec := range raw.Tasks {
		t, terrs := resolveTask(i, raw.Defaults, spec)
		for _, e := range terrs {
			bad(e.key, "%s", e.msg)
		}
		if t == nil {
			continue
		}
		if j, dup := seen[t.Name]; dup {
			bad(fmt.Sprintf("tasks[%d].name", i), "duplicate task name %q (also tasks[%d])", t.Name, j)
			continue
		}
		seen[t.Name] = i
		cfg.Tasks = append(cfg.Tasks, *t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

type keyErr struct{ key, msg string }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// resolveTask applies builtin ← defaults ← spec and validates the result.
func resolveTask(i int, def, spec TaskSpec) (*Task, []keyErr) {
	var errs []keyErr
	k := func(name string) string { return fmt.Sprintf("tasks[%d].%s", i, name) }
	bad := func(name, format string, args ...any) {
		errs = append(errs, keyErr{k(name), fmt.Sprintf(format, args...)})
	}
	t := builtin
	for _, s := range []TaskSpec{def, spec} {
		apply(&t, s)
	}
	if spec.Name == nil || *spec.Name == "" {
		bad("name", "missing: every task needs a name")
	} else {
		t.Name = *spec.Name
		if !nameRE.MatchString(t.Name) || len(t.Name) > 200 {
			bad("name", "%q: use letters, digits and . _ - (at most 200)", t.Name)
		}
	}
	tz := "UTC"
	for _, s := range []TaskSpec{def, spec} {
		if s.Timezone != nil {
			tz = *s.Timezone
		}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "" || tz == "Local" {
		bad("timezone", "unknown timezone %q (use an IANA name such as \"Europe/Berlin\")", tz)
		loc = time.UTC
	}
	t.Location = loc

	// Schedule: exactly one of every and cron, from the task or [defaults].
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
	default:
		if spec.Every != nil || def.Every != nil {
			bad("every", "must be more than 0s")
		} else {
			bad("every", "missing: give every or cron")
		}
	}

	actions := 0
	for _, a := range []bool{t.Command != nil, t.URL != "", t.Handler != ""} {
		if a {
			actions++
		}
	}
	switch {
	case actions == 0:
		bad("command", "no action: give one of command, url, handler")
	case actions > 1:
		bad("command", "give only one of command, url, handler")
	}
	if t.Command != nil && (len(t.Command) == 0 || t.Command[0] == "") {
		bad("command", "empty argv")
	}
	if t.URL != "" && !strings.HasPrefix(t.URL, "http://") && !strings.HasPrefix(t.URL, "https://") {
		bad("url", "%q: must be http:// or https://", t.URL)
	}
	sources := 0
	for _, s := range []bool{t.Entities != nil, t.EntitiesFile != "", t.EntitiesCommand != nil} {
		if s {
			sources++
		}
	}
	if sources > 1 {
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
	if t.Concurrency < 1 {
		bad("concurrency", "%d: must be at least 1", t.Concurrency)
	}
	if t.LeaseTTL < lease.MinTTL {
		bad("lease_ttl", "%v: too short to renew (every lease_ttl/3) before it expires; use at least %v", t.LeaseTTL, lease.MinTTL)
	}
	if t.Timeout <= 0 {
		bad("timeout", "must be more than 0s")
	}
	if t.WarnAfter < 0 {
		bad("warn_after", "must not be negative")
	}
	if t.OnBusy != "skip" && t.OnBusy != "queue" {
		bad("on_busy", "%q: use skip or queue", t.OnBusy)
	}
	if t.RescheduleExitCode < 0 || t.RescheduleExitCode > 255 {
		bad("reschedule_exit_code", "%d: an exit status is 0..255", t.RescheduleExitCode)
	}
	if t.RescheduleExitCode == 0 && t.Command != nil {
		bad("reschedule_exit_code", "0 means success; use another status (0 is not allowed)")
	}
	if t.MaxReschedules < 0 {
		bad("max_reschedules", "must not be negative")
	}
	if t.Retries < 0 {
		bad("retries", "must not be negative")
	}
	if t.Spread > 0 && t.Every > 0 && t.Spread >= t.Every {
		bad("spread", "%v: must be shorter than every (%v)", t.Spread, t.Every)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &t, nil
}

// apply copies the keys given in s onto t.
func apply(t *Task, s TaskSpec) {
	dur := func(dst *time.Duration, src *Duration) {
		if src != nil {
			*dst = src.Duration
		}
	}
	str := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	num := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	list := func(dst *[]string, src *[]string) {
		if src != nil {
			*dst = append([]string{}, *src...)
		}
	}
	dur(&t.Every, s.Every)
	str(&t.Cron, s.Cron)
	dur(&t.Spread, s.Spread)
	list(&t.Entities, s.Entities)
	str(&t.EntitiesFile, s.EntitiesFile)
	list(&t.EntitiesCommand, s.EntitiesCommand)
	dur(&t.EntitiesTimeout, s.EntitiesTimeout)
	list(&t.Command, s.Command)
	str(&t.URL, s.URL)
	str(&t.Handler, s.Handler)
	num(&t.Concurrency, s.Concurrency)
	dur(&t.Timeout, s.Timeout)
	dur(&t.WarnAfter, s.WarnAfter)
	dur(&t.LeaseTTL, s.LeaseTTL)
	str(&t.OnBusy, s.OnBusy)
	num(&t.RescheduleExitCode, s.RescheduleExitCode)
	dur(&t.RescheduleDelay, s.RescheduleDelay)
	num(&t.MaxReschedules, s.MaxReschedules)
	num(&t.Retries, s.Retries)
	dur(&t.CatchUp, s.CatchUp)
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
