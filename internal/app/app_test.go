package app

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/tasks"
)

// TestReplicaIDs: the config's replica_id, else TICKD_REPLICA_ID, else
// POD_NAME, else hostname-pid; as PID 1 (a container's first process) the
// default is unique, so two containers sharing a hostname never share it.
func TestReplicaIDs(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	host, _ := os.Hostname()
	expect.Equal(t, "configured", ReplicaIDFrom(config.Daemon{ReplicaID: "a"}, env(map[string]string{"TICKD_REPLICA_ID": "b", "POD_NAME": "c"}), 7, true), "a")
	expect.Equal(t, "TICKD_REPLICA_ID", ReplicaIDFrom(config.Daemon{}, env(map[string]string{"TICKD_REPLICA_ID": "b", "POD_NAME": "c"}), 7, true), "b")
	expect.Equal(t, "POD_NAME", ReplicaIDFrom(config.Daemon{}, env(map[string]string{"POD_NAME": "tickd-7d9f-x2"}), 7, true), "tickd-7d9f-x2")
	expect.Equal(t, "hostname-pid", ReplicaIDFrom(config.Daemon{}, env(nil), 7, false), host+"-7")
	one, other := ReplicaIDFrom(config.Daemon{}, env(nil), 2, true), ReplicaIDFrom(config.Daemon{}, env(nil), 2, true)
	expect.True(t, "in a container, a unique id: "+one+", "+other, one != other && strings.HasPrefix(one, host+"-2-"))
}

func parse(t *testing.T, toml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("embedded.toml", []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestReplicaIDDefaultEmbedded: a program that embeds tickd gets the
// binary's replica-id default (here TICKD_REPLICA_ID), and the store and
// the scheduler run under it. Before, the default lived only in the
// binary: embedded, every instance ran as "local".
func TestReplicaIDDefaultEmbedded(t *testing.T) {
	t.Setenv("TICKD_REPLICA_ID", "svc-7")
	a, err := Open(parse(t, "[[tasks]]\nname = \"t\"\nevery = \"1h\"\ncommand = [\"true\"]\n"), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Store.Stop(context.Background()) }) //nolint:errcheck // not started
	expect.Equal(t, "the replica id", a.Replica, "svc-7")
	expect.Equal(t, "the store's replica id", a.Store.Replica(), "svc-7")
}

// TestDaemonOnlyKeysAreSaid: [daemon] keys only the binary reads, set in
// a config an embedding program opens, are named in one warning; the
// binary (Options.Daemon) is not warned.
func TestDaemonOnlyKeysAreSaid(t *testing.T) {
	t.Parallel()
	cfg := parse(t, "[daemon]\nlog_level = \"debug\"\nmetrics_addr = \"127.0.0.1:9100\"\nshutdown_timeout = \"5s\"\n\n[[tasks]]\nname = \"t\"\nevery = \"1h\"\ncommand = [\"true\"]\n")
	for _, daemon := range []bool{false, true} {
		var out bytes.Buffer
		a, err := Open(cfg, Options{Logger: slog.New(slog.NewJSONHandler(&out, nil)), ReplicaID: "r", Daemon: daemon})
		if err != nil {
			t.Fatal(err)
		}
		a.Store.Stop(context.Background()) //nolint:errcheck // not started
		said := strings.Contains(out.String(), `"keys":["log_level","metrics_addr"]`)
		expect.Equal(t, fmt.Sprintf("warned (daemon %v): %s", daemon, out.String()), said, !daemon)
	}
}

// TestTwoEmbeddedInstances: two instances of an embedding program on one
// Redis, each with its own replica id and its metrics in one registry
// under a label each, run a task's entities between them; each counts its
// renewal rounds (the store's wiring the binary has too), and the status
// and history documents say what ran, as tickd status and tickd history
// -json do.
func TestTwoEmbeddedInstances(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := parse(t, fmt.Sprintf(`
[redis]
url = "redis://%s/0"
key_prefix = "embedded"

[[tasks]]
name = "sync"
every = "1h"
catch_up = "1h"
lease_ttl = "1500ms"
handler = "sync"
entities = ["a", "b", "c", "d"]
`, srv.Addr))
	reg := prometheus.NewRegistry()
	var apps []*App
	for _, id := range []string{"svc-1", "svc-2"} {
		handlers := &tasks.Registry{}
		var a *App
		// Each run holds its lease until a renewal round went through.
		handlers.Register("sync", func(ctx context.Context, r tasks.Run) (tasks.Result, error) { //nolint:errcheck // one name
			for ctx.Err() == nil && testutil.ToFloat64(a.Metrics.LeaseRenewals) == 0 {
				time.Sleep(20 * time.Millisecond) // the handler's own work, not a test's wait
			}
			return tasks.Done, ctx.Err()
		})
		var err error
		a, err = Open(cfg, Options{Handlers: handlers, ReplicaID: id, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"instance": id}, reg)})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Store.InitEpoch(context.Background()); err != nil { // a Redis new to tickd: no quarantine
			t.Fatal(err)
		}
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Stop(ctx); err != nil {
				t.Errorf("stop %s: %v", id, err)
			}
		})
		apps = append(apps, a)
	}
	ctx := context.Background()
	expect.WaitFor(t, 30*time.Second, "the catch-up tick complete in the history", func() bool {
		h, err := apps[0].History(ctx, "sync", 5)
		return err == nil && len(h.Ticks) > 0 && h.Ticks[0].State == "complete" && h.Ticks[0].Runs == 4
	})
	for _, a := range apps {
		if testutil.ToFloat64(a.Metrics.Runs.WithLabelValues("sync", "tick", "done")) > 0 {
			expect.True(t, a.Replica+" counted renewal rounds", testutil.ToFloat64(a.Metrics.LeaseRenewals) > 0)
		}
	}
	st, err := apps[1].Status(ctx, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range st.Replicas {
		ids = append(ids, r.ID)
	}
	expect.True(t, fmt.Sprintf("both replicas in the status: %v", ids), strings.Contains(strings.Join(ids, " "), "svc-1") && strings.Contains(strings.Join(ids, " "), "svc-2"))
	expect.True(t, "the task in the status", len(st.Tasks) == 1 && st.Tasks[0].Name == "sync")
	if _, err := apps[0].History(ctx, "nope", 5); err == nil {
		t.Error("the history of a task nobody knows: no error")
	}
}
