package packaging

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tickd/tickd/internal/testkit/tier"
)

const chart = "deploy/helm/tickd" // from the module's root

// helm runs the helm tools/go.mod pins (GOWORK=off go tool -modfile=tools/go.mod
// helm) from the module's root.
func helm(args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"tool", "-modfile=tools/go.mod", "helm"}, args...)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOWORK=off") // the tools module is no module of go.work
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// object is what the tests read of a rendered Kubernetes object.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }

// kubecheck is tools/kubecheck, built once into a directory of the test
// binary's own.
var kubecheck struct {
	once sync.Once
	dir  string
	err  error
}

// render renders the chart with values files (from testdata), checks its
// objects with tools/kubecheck (each decoded strictly into its Kubernetes
// API type, offline), and returns them.
func render(t *testing.T, values ...string) []object {
	t.Helper()
	tier.Full(t, "helm and tools/kubecheck, built from tools/go.mod")
	args := []string{"template", "t", chart}
	for _, v := range values {
		args = append(args, "-f", filepath.Join("packaging", "testdata", v))
	}
	out, err := helm(args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	kubecheck.once.Do(func() {
		if kubecheck.dir, kubecheck.err = os.MkdirTemp("", "tickd-kubecheck"); kubecheck.err != nil {
			return
		}
		cmd := exec.Command("go", "-C", "../tools", "build", "-o", filepath.Join(kubecheck.dir, "kubecheck"), "./kubecheck")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			kubecheck.err = fmt.Errorf("building tools/kubecheck: %v\n%s", err, out)
		}
	})
	if kubecheck.err != nil {
		t.Fatal(kubecheck.err)
	}
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(filepath.Join(kubecheck.dir, "kubecheck"), file)
	cmd.Stderr = &stderr
	js, err := cmd.Output()
	if err != nil {
		t.Errorf("the rendered objects (%s) against the Kubernetes API types: %v\n%s", strings.Join(values, " "), err, stderr.String())
	}
	var objs []object
	if err := json.Unmarshal(js, &objs); err != nil {
		t.Fatalf("kubecheck's objects: %v", err)
	}
	return objs
}

// TestHelmChart: helm lint --strict, then the rendered manifests of two
// sets of values checked against the Kubernetes API types offline, and what
// docs/operations.md promises of them.
func TestHelmChart(t *testing.T) {
	tier.Full(t, "helm and tools/kubecheck, built from tools/go.mod")
	for _, values := range [][]string{nil, {"helm-replicated.yaml"}} {
		args := []string{"lint", "--strict", chart}
		for _, v := range values {
			args = append(args, "-f", filepath.Join("packaging", "testdata", v))
		}
		if out, err := helm(args...); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	def := render(t)
	checkChart(t, def, 30, false)
	rep := render(t, "helm-replicated.yaml")
	checkChart(t, rep, 45, true)
	if b, _ := json.Marshal(rep); !strings.Contains(string(b), `"mountPath":"/etc/tickd-redis"`) {
		t.Error("redisUrlSecret is not mounted at /etc/tickd-redis")
	}
	kinds := map[string]int{}
	for _, o := range rep {
		kinds[o.kind()]++
	}
	for kind, n := range map[string]int{"Deployment": 1, "ConfigMap": 2, "Service": 2, "Secret": 2, "PodDisruptionBudget": 1, "ServiceMonitor": 1, "Job": 1} {
		if kinds[kind] != n {
			t.Errorf("with three replicas and the console: %d %s, want %d", kinds[kind], kind, n)
		}
	}
	checkHook(t, rep)
	checkSpread(t, def, rep)
	// What the chart refuses, and says why: the values' schema refuses a
	// misspelt or mistyped value.
	for set, want := range map[string]string{
		"replicaCount=2":           "replicaCount above 1 needs a [redis] table",
		"web.enabled=true":         "web.enabled needs web.htpasswd",
		"replicaCont=2":            "additional properties 'replicaCont' not allowed",
		"daemon.logLevel=verbose":  "/daemon/logLevel",
		"metrics.port=metrics":     "/metrics/port",
		"configCheck.enable=false": "additional properties 'enable' not allowed",
	} {
		out, err := helm("template", "t", chart, "--set", set)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("helm template --set %s: %v, %q; want an error saying %q", set, err, out, want)
		}
	}
}

// checkChart checks the Deployment and its config: probes, the grace
// period above shutdown_timeout, the pod's security, the replica id, and a
// checksum annotation (rolling the pods on a change) unless watch_config.
func checkChart(t *testing.T, objs []object, shutdown int, watch bool) {
	t.Helper()
	var dep, cm object
	for _, o := range objs {
		switch o.kind() {
		case "Deployment":
			dep = o
		case "ConfigMap":
			cm = o
		}
	}
	if dep == nil || cm == nil {
		t.Fatalf("no Deployment or ConfigMap in %v", objs)
	}
	b, _ := json.Marshal(dep)
	s := string(b)
	for _, want := range []string{`"readinessProbe":{"failureThreshold":3,"httpGet":{"path":"/readyz","port":"metrics"}`,
		`"livenessProbe":{"failureThreshold":6,"httpGet":{"path":"/healthz","port":"metrics"}`,
		fmt.Sprintf(`"terminationGracePeriodSeconds":%d`, shutdown+20), `"runAsNonRoot":true`, `"readOnlyRootFilesystem":true`,
		`"fieldPath":"metadata.name"`, `"mountPath":"/etc/tickd"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the Deployment lacks %s:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"checksum/config"`) == watch {
		t.Errorf("checksum/config annotation present: %v, with watchConfig %v", !watch, watch)
	}
	config := cm["data"].(map[string]any)["config.toml"].(string)
	for _, want := range []string{fmt.Sprintf("shutdown_timeout = \"%ds\"", shutdown), fmt.Sprintf("watch_config = %v", watch), `metrics_addr = ":9464"`} {
		if !strings.Contains(config, want) {
			t.Errorf("config.toml lacks %s:\n%s", want, config)
		}
	}
	checkConfig(t, config)
}

// checkConfig runs tickd check on a rendered config, as the pod would load
// it; the files it names (a Redis URL, an htpasswd) are made up beside it.
func checkConfig(t *testing.T, config string) {
	t.Helper()
	dir := t.TempDir()
	for from, to := range map[string]string{"/etc/tickd-redis/url": "redis-url", "/etc/tickd-web/htpasswd": "htpasswd"} {
		config = strings.ReplaceAll(config, from, filepath.Join(dir, to))
	}
	os.WriteFile(filepath.Join(dir, "redis-url"), []byte("redis://127.0.0.1:1/0\n"), 0o600)                                           //nolint:errcheck
	os.WriteFile(filepath.Join(dir, "htpasswd"), []byte("ops:$2y$10$0123456789012345678901uV1hQ0e2xK3bI9wq6rZp4o1m8s7t6u5\n"), 0o600) //nolint:errcheck
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./cmd/tickd", "check", "-config", path)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "HC_PING_KEY=k") // the values' env, as the hook Job has it
	if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "redis: ") {
		t.Errorf("tickd check of the chart's config: %v\n%s", err, out)
	}
}

// TestHelmJobMatchesTheAlertRules: the job the chart's ServiceMonitor gives
// its targets (its jobLabel, read off the metrics Service) is the one the
// alert rules select: with one replica down and one up, promtool fires "a
// replica down" and not "every replica down". Before, job was the
// Service's name (t-tickd-metrics): "every replica down" fired for ever and
// "a replica down" never.
func TestHelmJobMatchesTheAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: install it (apt-get install -y prometheus, or a Prometheus release's promtool)")
	}
	var label, job string
	objs := render(t, "helm-replicated.yaml")
	for _, o := range objs {
		if o.kind() == "ServiceMonitor" {
			label, _ = o["spec"].(map[string]any)["jobLabel"].(string)
		}
	}
	for _, o := range objs {
		md := o["metadata"].(map[string]any)
		if o.kind() == "Service" && strings.HasSuffix(md["name"].(string), "-metrics") {
			if label == "" {
				job = md["name"].(string) // the Prometheus Operator's default
			} else {
				job, _ = md["labels"].(map[string]any)[label].(string)
			}
		}
	}
	t.Logf("the ServiceMonitor's jobLabel %q gives job=%q", label, job)
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "tickd-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	test := fmt.Sprintf(`rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job=%[1]q, instance="10.0.0.1:9464"}'
        values: '1 0x20'
      - series: 'up{job=%[1]q, instance="10.0.0.2:9464"}'
        values: '1x20'
    alert_rule_test:
      - eval_time: 10m
        alertname: TickdAllReplicasDown
        exp_alerts: []
      - eval_time: 10m
        alertname: TickdReplicaDown
        exp_alerts:
          - exp_labels: {severity: ticket, instance: "10.0.0.1:9464", job: %[1]q}
            exp_annotations:
              summary: "tickd replica 10.0.0.1:9464 is down"
              description: "Prometheus cannot scrape it; the other replicas carry its work."
`, job)
	if err := os.WriteFile(filepath.Join(dir, "test.yml"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the rendered job %q and the alert rules disagree: %v\n%s", job, err, out)
	}
}

// checkHook: the configCheck hook runs tickd check, before an install or an
// upgrade, on a ConfigMap of its own holding the config the release rolls
// out (the release's is not there yet at an install), with the files it
// names mounted where the pods have them.
func checkHook(t *testing.T, objs []object) {
	t.Helper()
	var job, cm, deployCM object
	for _, o := range objs {
		md := o["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		hook, _ := ann["helm.sh/hook"].(string)
		switch {
		case o.kind() == "Job":
			job = o
			if hook != "pre-install,pre-upgrade" {
				t.Errorf("the check Job's hook: %q", hook)
			}
		case o.kind() == "ConfigMap" && hook != "":
			cm = o
		case o.kind() == "ConfigMap":
			deployCM = o
		}
	}
	if job == nil || cm == nil || deployCM == nil {
		t.Fatalf("no check Job, or no ConfigMap for it: %v %v", job, cm)
	}
	if cm["data"].(map[string]any)["config.toml"] != deployCM["data"].(map[string]any)["config.toml"] {
		t.Error("the hook checks another config than the pods run")
	}
	b, _ := json.Marshal(job)
	for _, want := range []string{`"args":["check","-config","/etc/tickd/config.toml"]`, `"mountPath":"/etc/tickd-redis"`, `"mountPath":"/etc/tickd-web"`,
		`"restartPolicy":"Never"`, `"backoffLimit":0`, `"runAsNonRoot":true`, `"name":"HC_PING_KEY"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the check Job lacks %s:\n%s", want, b)
		}
	}
}

// checkSpread: several replicas spread over nodes by default (the chart's
// selector added); one replica has no constraint.
func checkSpread(t *testing.T, one, several []object) {
	t.Helper()
	spread := func(objs []object) string {
		for _, o := range objs {
			if o.kind() == "Deployment" {
				b, _ := json.Marshal(o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["topologySpreadConstraints"])
				return string(b)
			}
		}
		return ""
	}
	if got := spread(one); got != "null" {
		t.Errorf("one replica: topologySpreadConstraints %s, want none", got)
	}
	if got := spread(several); !strings.Contains(got, `"topologyKey":"kubernetes.io/hostname"`) || !strings.Contains(got, `"app.kubernetes.io/name":"tickd"`) {
		t.Errorf("three replicas: topologySpreadConstraints %s, want over nodes, with the chart's selector", got)
	}
}
