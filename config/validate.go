package config

import (
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/listen"
	"github.com/tickd/tickd/internal/regular"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
	"github.com/tickd/tickd/tasks"
)

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

// validateWeb checks [web]: an address, auth off loopback, both TLS files
// or neither.
func validateWeb(d *decoder, w *Web) {
	switch _, _, err := net.SplitHostPort(w.Listen); {
	case w.Listen == "":
		d.bad("web.listen", "required: the console's host:port, e.g. \"127.0.0.1:8080\"")
	case err != nil:
		d.bad("web.listen", "%q: want host:port, e.g. \"127.0.0.1:8080\"", w.Listen)
	case w.HtpasswdFile == "" && !listen.Loopback(w.Listen):
		d.bad("web.listen", "%q is not a loopback address: set htpasswd_file (htpasswd -B), or listen on 127.0.0.1", w.Listen)
	}
	if len(w.Admins) > 0 && w.HtpasswdFile == "" {
		d.bad("web.admins", "admins need users: set htpasswd_file")
	}
	if w.InsecureLocalAdmin && w.HtpasswdFile != "" {
		d.bad("web.insecure_local_admin", "with htpasswd_file, admins says who may act")
	}
	if w.Refresh < time.Second {
		d.bad("web.refresh", "%v: at least 1s", w.Refresh)
	}
	for i, p := range w.TrustedProxies {
		if _, _, err := net.ParseCIDR(p); err != nil {
			d.bad("web.trusted_proxies", "element %d, %q: want a network such as \"127.0.0.1/32\" or \"10.0.0.0/8\"", i, p)
		}
	}
	if err := listen.CheckBasePath(w.BasePath); err != nil {
		d.bad("web.base_path", "%q: %v", w.BasePath, err)
	}
	if w.MaxConnections < 1 {
		d.bad("web.max_connections", "%d: at least 1", w.MaxConnections)
	}
	if (w.TLSCertFile == "") != (w.TLSKeyFile == "") {
		d.bad("web.tls_cert_file", "give tls_cert_file and tls_key_file together")
	} else if w.TLSCertFile != "" {
		if _, err := regular.KeyPair(w.TLSCertFile, w.TLSKeyFile); err != nil {
			d.bad("web.tls_cert_file", "%v", err)
		}
	}
}

// httpURL parses s as an http:// or https:// URL with a host.
func httpURL(s string) (*url.URL, bool) {
	u, err := url.Parse(s)
	return u, err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func validateTelemetry(d *decoder, t *Telemetry) {
	if t.Endpoint != "" {
		if u, ok := httpURL(t.Endpoint); !ok {
			d.bad("telemetry.endpoint", "%q: want an OTLP/HTTP collector's base URL, e.g. \"http://collector:4318\"", t.Endpoint)
		} else if strings.HasSuffix(u.Path, "/v1/traces") {
			d.bad("telemetry.endpoint", "%q: give the base URL; tickd adds /v1/traces", t.Endpoint)
		}
	}
	if t.RunSpans < 0 {
		d.bad("telemetry.run_spans", "%d: at least 1 (or leave it out: 1000)", t.RunSpans)
	}
}

func validateRedis(d *decoder, r *Redis, urlGiven bool) {
	if r.URLFile != "" {
		if urlGiven {
			d.bad("redis.url_file", "give url or url_file, not both")
		}
		b, err := readRegular(r.URLFile, 64<<10)
		if err != nil {
			d.bad("redis.url_file", "%v", err)
			return
		}
		r.URL = strings.TrimSpace(string(b))
	}
	if !strings.HasPrefix(r.URL, "redis://") && !strings.HasPrefix(r.URL, "rediss://") && !strings.HasPrefix(r.URL, "unix://") {
		d.bad("redis.url", "must start with redis://, rediss:// or unix://")
	}
	if !driver.ValidPrefix(r.KeyPrefix) {
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
	validateHeartbeat(t, bad)
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
		s, err := schedule.ParseCron(t.Cron, loc)
		if err != nil {
			bad("cron", "%v", err)
		}
		t.Schedule = s
	case t.Every > 0:
		if t.Every < time.Second || t.Every%time.Second != 0 {
			bad("every", "%v: must be a whole number of seconds, at least 1s", t.Every)
		}
		t.Schedule = schedule.Every{Interval: t.Every, Location: loc}
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
	// The shell may come after a wrapper: timeout 30 sh -c, env A=b bash -c.
	for j := range t.Command {
		if i := shellScriptArg(t.Command[j:]); i > 0 && strings.Contains(t.Command[j+i], "{entity}") {
			bad("command", "{entity} inside a shell's script (%s -c): an entity id would be read as shell words; use \"$TICKD_ENTITY\" in the script (quoted), or pass {entity} as an argument of its own", filepath.Base(t.Command[j]))
			break
		}
	}
	for _, a := range t.Command {
		for _, m := range placeholder.FindAllStringSubmatch(a, -1) {
			if name := m[1]; name != "entity" {
				hint := ""
				if closest(name, []string{"entity"}) != "" {
					hint = " (did you mean {entity}?)"
				}
				bad("command", "unknown placeholder {%s}%s: only {entity} is replaced; the task, the tick and the rest are in the environment (TICKD_TASK, TICKD_TICK…)", name, hint)
			}
		}
	}
	if t.URL != "" && !strings.HasPrefix(t.URL, "http://") && !strings.HasPrefix(t.URL, "https://") {
		bad("url", "%q: must be http:// or https://", t.URL)
	}
	validateHeaders(t, bad)
	validateRedirects(t, bad)
	if t.RescheduleExitCode == 0 && t.Command != nil {
		bad("reschedule_exit_code", "0 means success; use another status (0 is not allowed)")
	}
}

// shells are the programs whose -c argument is a script.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "fish": true}

// shellScriptArg is the index of argv's script when argv runs a shell with
// -c (or -lc, -ec…): the argument after that option; 0 for none.
func shellScriptArg(argv []string) int {
	if len(argv) < 3 || !shells[filepath.Base(argv[0])] {
		return 0
	}
	for i := 1; i < len(argv)-1; i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") || a == "--" {
			return 0
		}
		if !strings.HasPrefix(a, "--") && strings.Contains(a, "c") {
			return i + 1
		}
	}
	return 0
}

// placeholder is what reads as a placeholder in a command's argument:
// {name} in lower case, not a shell's ${name}.
var placeholder = regexp.MustCompile(`(?:^|[^$])\{([a-z_][a-z0-9_]*)\}`)

// envRef is a reference to an environment variable in a header value.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// headerName is an HTTP header name (RFC 9110's token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// validateRedirects checks follow_redirects.
func validateRedirects(t *Task, bad badFunc) {
	switch {
	case t.FollowRedirects == "":
	case t.URL == "":
		bad("follow_redirects", "only an HTTP action (url) follows redirects")
	case t.FollowRedirects != tasks.RedirectsNone && t.FollowRedirects != tasks.RedirectsSameOrigin:
		bad("follow_redirects", "%q: use %q (the default) or %q", t.FollowRedirects, tasks.RedirectsNone, tasks.RedirectsSameOrigin)
	}
}

// validateHeaders checks the HTTP action's headers and puts the
// environment's values in place of ${NAME}.
func validateHeaders(t *Task, bad badFunc) {
	if len(t.Headers) > 0 && t.URL == "" {
		bad("headers", "only an HTTP action (url) sends headers")
	}
	t.Headers = expandHeaders("headers", t.Headers, bad)
}

// expandHeaders checks key's headers and puts the environment's values in
// place of ${NAME}. Errors name the header and the variable, never a
// value.
func expandHeaders(key string, h map[string]string, bad badFunc) map[string]string {
	if h == nil {
		return nil
	}
	expanded := make(map[string]string, len(h)) // [defaults]' map is shared by its tasks
	for _, name := range slices.Sorted(maps.Keys(h)) {
		v := h[name]
		if !headerName.MatchString(name) {
			bad(key, "%q is not a header name", name)
			continue
		}
		if strings.EqualFold(name, "Content-Type") || strings.EqualFold(name, "Host") || strings.EqualFold(name, "Content-Length") {
			bad(key, "%s is set by tickd", name)
			continue
		}
		v, missing := expandEnv(v)
		if len(missing) > 0 {
			bad(key, "%s: environment variable %s is not set", name, strings.Join(missing, ", "))
			continue
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			bad(key, "%s: the value holds a line break or NUL", name)
			continue
		}
		expanded[name] = v
	}
	return expanded
}

// expandEnv puts the environment's values in place of ${NAME} in v, and
// lists the variables that are not set.
func expandEnv(v string) (string, []string) {
	var missing []string
	v = envRef.ReplaceAllStringFunc(v, func(ref string) string {
		env := ref[2 : len(ref)-1]
		val, ok := os.LookupEnv(env)
		if !ok {
			missing = append(missing, env)
		}
		return val
	})
	return v, missing
}

// validateHeartbeat checks heartbeat_url, with {task} and the environment's
// values put in. Errors never show the URL: its path is the check's secret.
func validateHeartbeat(t *Task, bad badFunc) {
	if t.HeartbeatURL == "" {
		return
	}
	v, missing := expandEnv(strings.ReplaceAll(t.HeartbeatURL, "{task}", t.Name))
	t.HeartbeatURL = ""
	if len(missing) > 0 {
		bad("heartbeat_url", "environment variable %s is not set", strings.Join(missing, ", "))
		return
	}
	u, ok := httpURL(v)
	switch {
	case !ok:
		bad("heartbeat_url", "not an http:// or https:// URL: want a monitor's ping URL, e.g. \"https://hc-ping.com/${HC_PING_KEY}/{task}\"")
	case u.Fragment != "" || u.User != nil || u.Query().Has("rid"):
		bad("heartbeat_url", "give the check's URL, with its own query if it has one: tickd adds /start or /fail to its path and rid= to its query")
	default:
		// A query stays (Healthchecks' ?create=1); the path's last slash goes.
		base, query, ok := strings.Cut(v, "?")
		t.HeartbeatURL = strings.TrimSuffix(base, "/")
		if ok {
			t.HeartbeatURL += "?" + query
		}
	}
}

// validateCatchUp checks which missed ticks run.
func validateCatchUp(t *Task, bad badFunc) {
	switch {
	case t.CatchUpRuns != CatchUpLatest && t.CatchUpRuns != CatchUpAll:
		bad("catch_up_runs", "%q: use %s or %s", t.CatchUpRuns, CatchUpLatest, CatchUpAll)
	case t.CatchUpRuns == CatchUpAll && t.CatchUp <= 0:
		bad("catch_up_runs", "%q runs the ticks missed within catch_up: set catch_up too", CatchUpAll)
	case t.CatchUpRuns == CatchUpAll && t.TimezoneFrom != "":
		bad("catch_up_runs", "%q is not yet for a task whose entities tick in their own zones (timezone_from): use %s", CatchUpAll, CatchUpLatest)
	}
	if t.CatchUpMax < 1 || t.CatchUpMax > MaxCatchUp {
		bad("catch_up_max", "%d: use 1..%d", t.CatchUpMax, MaxCatchUp)
	}
	if t.RunRecord > MaxRunRecord {
		bad("run_record", "%s: at most %s (a year)", t.RunRecord, MaxRunRecord)
	}
}

// validateBusy checks what a tick does for a busy entity.
func validateBusy(t *Task, bad badFunc) {
	if !slices.Contains([]OnBusy{OnBusySkip, OnBusyQueue, OnBusyReplace}, t.OnBusy) {
		bad("on_busy", "%q: use %s, %s or %s", t.OnBusy, OnBusySkip, OnBusyQueue, OnBusyReplace)
	}
	switch {
	case t.QueueMax < 1 || t.QueueMax > MaxQueue:
		bad("queue_max", "%d: use 1..%d", t.QueueMax, MaxQueue)
	case t.QueueMax > 1 && t.OnBusy != OnBusyQueue:
		bad("queue_max", "%d buffers ticks for on_busy = %q; this task's on_busy is %q", t.QueueMax, OnBusyQueue, t.OnBusy)
	}
}

// validateLimits checks the keys that bound runs.
func validateLimits(t *Task, bad badFunc) {
	if t.Concurrency < 1 {
		bad("concurrency", "%d: must be at least 1", t.Concurrency)
	}
	for j, n := range t.Limits {
		if slices.Contains(t.Limits[:j], n) {
			bad("limits", "%q is named twice", n)
		}
	}
	if t.Shards < 1 || t.Shards > driver.MaxShards {
		bad("shards", "%d: use 1..%d", t.Shards, driver.MaxShards)
	}
	if t.LeaseTTL < driver.MinTTL {
		bad("lease_ttl", "%v: too short to renew (every lease_ttl/3) before it expires; use at least %v", t.LeaseTTL, driver.MinTTL)
	}
	if t.Timeout <= 0 {
		bad("timeout", "must be more than 0s")
	}
	validateBusy(t, bad)
	validateCatchUp(t, bad)
	for _, k := range []struct {
		key string
		d   time.Duration
	}{{"priority", t.Priority}, {"trigger_priority", t.TriggerPriority}} {
		if k.d < 0 {
			bad(k.key, "%v: a head start is not negative", k.d)
		}
	}
	if t.RescheduleExitCode < 0 || t.RescheduleExitCode > 255 {
		bad("reschedule_exit_code", "%d: an exit status is 0..255", t.RescheduleExitCode)
	}
	if t.RescheduleExitCode == tasks.BackoffExitCode {
		bad("reschedule_exit_code", "%d says \"the API asked me to back off\" (with a retry-after line): choose another", t.RescheduleExitCode)
	}
	for k, n := range map[string]int{"max_reschedules": t.MaxReschedules, "retries": t.Retries, "failure_output": t.FailureOutput} {
		if n < 0 {
			bad(k, "must not be negative")
		}
	}
	for k, n := range map[string]int{"history_ticks": t.HistoryTicks, "failures_kept": t.FailuresKept, "flag_after": t.FlagAfter} {
		if n < 1 {
			bad(k, "%d: must be at least 1", n)
		}
	}
	if t.HistoryAge < time.Minute {
		bad("history_age", "%v: keep at least 1m", t.HistoryAge)
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
