package packaging

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// podmanArgs run containers where this machine allows: runc with cgroupfs
// (no systemd), and limits within the ones it may set.
var podmanArgs = []string{"--runtime=runc", "--cgroup-manager=cgroupfs"}

const imageEvery = 2 * time.Second

// podman runs podman with args and returns its output, failing the test if
// it fails.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "podman", append(slices.Clone(podmanArgs), args...)...))
}

// loadImage loads the archive into podman's store and returns the image's
// name; it is removed when the test ends.
func loadImage(t *testing.T, archive string) string {
	t.Helper()
	out := podman(t, "load", "-i", archive)
	i := strings.LastIndex(out, "Loaded image: ")
	if i < 0 {
		t.Fatalf("podman load: no image named in %q", out)
	}
	ref := strings.TrimSpace(out[i+len("Loaded image: "):])
	t.Cleanup(func() { exec.Command("podman", append(podmanArgs, "rmi", "-f", ref)...).Run() }) //nolint:errcheck
	return ref
}

// TestImage: the image as docs/operations.md describes it, then two
// replicas run from it against a loopback Redis with --network=host (one
// host name): each entity runs once per tick, the replicas have distinct
// ids, an exec task's orphaned grandchildren are reaped by tickd as PID 1,
// and podman stop ends one cleanly (exit 0) while the other carries on.
func TestImage(t *testing.T) {
	tool(t, "podman", "podman")
	tool(t, "runc", "runc")
	dir, v := dist(t)
	ref := loadImage(t, filepath.Join(dir, "tickd-image.tar"))
	checkImageConfig(t, ref, v)

	srv := redistest.Start(t)
	c := startContainers(t, ref, srv.Addr)
	store := storeOn(t, srv.Addr)
	expect.WaitFor(t, 60*time.Second, "two replicas registered with distinct ids", func() bool {
		rs, err := store.Fleet().Replicas(context.Background())
		return err == nil && len(rs) == 2 && rs[0].ID != rs[1].ID && rs[0].DuplicateOn == "" && rs[1].DuplicateOn == ""
	})
	rs, _ := store.Fleet().Replicas(context.Background())
	for _, r := range rs {
		if r.Version != v {
			t.Errorf("replica %s says version %q, want %q", r.ID, r.Version, v)
		}
	}
	t.Logf("replica ids: %s, %s", rs[0].ID, rs[1].ID)
	expect.WaitFor(t, 60*time.Second, "three ticks in a row where every entity ran", func() bool {
		return completeTicksInARow(c.runs(t), time.Time{}) >= 3
	})

	// The orphans: each run's grandchild outlives it by 100ms, re-parented
	// to the container's PID 1, which must reap it.
	pid, err := strconv.Atoi(podman(t, "inspect", "-f", "{{.State.Pid}}", c.names[1]))
	if err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 30*time.Second, "orphaned grandchildren that ended", func() bool { return orphansEnded(c.runsLogs[1]) >= 5 })
	expect.WaitFor(t, 10*time.Second, "no zombie left by the ended orphans", func() bool { return len(zombiesOf(pid)) == 0 })

	stopped := time.Now()
	podman(t, "stop", "-t", "30", c.names[0])
	if code := podman(t, "inspect", "-f", "{{.State.ExitCode}}", c.names[0]); code != "0" {
		t.Errorf("podman stop: exit code %s, want 0\n%s", code, podman(t, "logs", c.names[0]))
	}
	t.Logf("podman stop took %v", time.Since(stopped).Round(10*time.Millisecond))
	expect.WaitFor(t, 60*time.Second, "the other replica running every entity, tick after tick", func() bool {
		return completeTicksInARow(c.runs(t), stopped) >= 2
	})
	// A run whose worker was SIGKILLed (its replica stalled past its lease
	// on a loaded machine) left no end record: its replica's log bounds it.
	f := tickdtest.Check(c.runs(t), tickdtest.OpenEndByLog(tickdtest.LoggedEnds(c.logs(t)), time.Now()))
	t.Logf("runs: %v", f)
	if f.Overlaps != 0 || f.DuplicateTickRuns != 0 || f.FenceViolations != 0 {
		t.Errorf("guarantees broken: %v\n%s", f, strings.Join(f.Examples, "\n"))
	}
}

// checkImageConfig checks what the image says of itself.
func checkImageConfig(t *testing.T, ref, version string) {
	var img []struct {
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
			Labels     map[string]string
		}
	}
	if err := json.Unmarshal([]byte(podman(t, "image", "inspect", ref)), &img); err != nil || len(img) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	cfg := img[0].Config
	if cfg.User == "" || cfg.User == "0" || strings.HasPrefix(cfg.User, "0:") || cfg.User == "root" {
		t.Errorf("the image runs as %q, want a non-root user", cfg.User)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"tickd"}) || !slices.Equal(cfg.Cmd, []string{"run", "-config", "/etc/tickd/config.toml"}) {
		t.Errorf("entrypoint %q, cmd %q", cfg.Entrypoint, cfg.Cmd)
	}
	if cfg.Labels["org.opencontainers.image.version"] != version || cfg.Labels["org.opencontainers.image.revision"] == "" ||
		cfg.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("labels %v", cfg.Labels)
	}
	// The image's own config runs (no Redis: in-process leases).
	if out := podman(t, "run", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", ref, "check", "-config", "/etc/tickd/config.toml"); !strings.Contains(out, "leases: in-process") {
		t.Errorf("tickd check in the image: %s", out)
	}
}

type containers struct {
	names    []string
	runsLogs []string // each container's worker records: pids are per container
}

// runs is the runs of both containers.
func (c containers) runs(t *testing.T) []tickdtest.Run {
	var runs []tickdtest.Run
	for _, l := range c.runsLogs {
		runs = append(runs, tickdtest.ReadRuns(t, l)...)
	}
	return runs
}

// logs is the logs of both containers.
func (c containers) logs(t *testing.T) []string {
	var logs []string
	for _, n := range c.names {
		logs = append(logs, podman(t, "logs", n))
	}
	return logs
}

// startContainers starts two replicas of ref, with a config of ten
// entities ticking every 2s on the Redis at addr, and the test worker as
// their exec task (mounted: the image has nothing but tickd).
func startContainers(t *testing.T, ref, addr string) containers {
	etc, work := t.TempDir(), t.TempDir()
	for _, d := range []string{etc, work} {
		if err := os.Chmod(d, 0o777); err != nil { // the image's user is not the test's
			t.Fatal(err)
		}
	}
	worker := filepath.Join(work, "testworker")
	build := exec.Command("go", "build", "-o", worker, "./internal/testkit/testworker")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static: the image has no libc
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the worker: %v\n%s", err, out)
	}
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", fmt.Sprint("e", i))
	}
	cfg := fmt.Sprintf("[daemon]\nshutdown_timeout = \"5s\"\nlog_format = \"json\"\n[redis]\nurl = \"redis://%s/0\"\nkey_prefix = \"image\"\n[defaults]\nlease_ttl = \"3s\"\n"+
		"[[tasks]]\nname = \"sync\"\nevery = %q\ncommand = [\"/work/testworker\"]\nentities = [%s]\n",
		addr, imageEvery.String(), strings.Join(ids, ", "))
	tickdtest.WriteFile(t, filepath.Join(etc, "config.toml"), cfg)
	if err := os.Chmod(filepath.Join(etc, "config.toml"), 0o644); err != nil {
		t.Fatal(err)
	}
	var c containers
	for _, n := range []string{"a", "b"} {
		runsLog := filepath.Join(work, "runs-"+n+".log")
		for _, f := range []string{runsLog, runsLog + ".orphans"} {
			tickdtest.WriteFile(t, f, "")
			if err := os.Chmod(f, 0o666); err != nil {
				t.Fatal(err)
			}
		}
		c.runsLogs = append(c.runsLogs, runsLog)
		name := fmt.Sprintf("tickd-test-%d-%s", os.Getpid(), n)
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := exec.Command("podman", append(podmanArgs, "logs", name)...).CombinedOutput()
				t.Logf("log of %s:\n%s", name, out)
			}
			exec.Command("podman", append(podmanArgs, "rm", "-f", "-t", "0", name)...).Run() //nolint:errcheck
		})
		podman(t, "run", "-d", "--name", name, "--network=host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"-v", etc+":/etc/tickd:ro", "-v", work+":/work", "-e", "TESTWORKER_LOG=/work/"+filepath.Base(runsLog),
			"-e", "TESTWORKER_MAX_SLEEP=200ms", "-e", "TESTWORKER_ORPHAN=100ms", ref)
		c.names = append(c.names, name)
	}
	return c
}

// storeOn is a lease store on the Redis at addr, as an operator command
// opens one.
func storeOn(t *testing.T, addr string) *lease.Store {
	cl := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { cl.Close() })
	s, err := stores.Redis(cl, "image", lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// completeTicksInARow is the longest run of consecutive ticks after since
// in which every one of the ten entities had its tick run.
func completeTicksInARow(runs []tickdtest.Run, since time.Time) int {
	per := map[int64]map[string]bool{}
	for _, r := range runs {
		tick, err := time.Parse(time.RFC3339Nano, r.Start.Tick)
		if r.Start.Reason != "tick" || err != nil || tick.Before(since) {
			continue
		}
		if per[tick.Unix()] == nil {
			per[tick.Unix()] = map[string]bool{}
		}
		per[tick.Unix()][r.Start.Entity] = true
	}
	best, cur := 0, 0
	var ticks []int64
	for k := range per {
		ticks = append(ticks, k)
	}
	slices.Sort(ticks)
	for i, k := range ticks {
		switch {
		case len(per[k]) < 10:
			cur = 0
		case i > 0 && k-ticks[i-1] == int64(imageEvery/time.Second) && cur > 0:
			cur++
		default:
			cur = 1
		}
		best = max(best, cur)
	}
	return best
}

// orphansEnded is how many orphaned grandchildren wrote their last line.
func orphansEnded(runsLog string) int {
	data, _ := os.ReadFile(runsLog + ".orphans")
	return strings.Count(string(data), "\n")
}

// zombiesOf lists the pids of ppid's children that ended and were not
// waited for, read from /proc.
func zombiesOf(ppid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[0] == "Z" && fields[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}
