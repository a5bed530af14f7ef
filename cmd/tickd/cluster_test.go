package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/expect"
	"github.com/tickd/tickd/internal/redistest"
	"github.com/tickd/tickd/internal/tickdtest"
)

// The operator commands on a Redis Cluster: trigger stores a due run in
// the task's bucket, status finds it (scanning every master) with the
// replication line, pause and resume, lock runs its command, unlock says
// nothing is held, and check -redis connects.
func TestOperatorCommandsOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	tickdtest.InitEpochCluster(t, cl.Addrs(), "tickd")
	cfg := filepath.Join(t.TempDir(), "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[redis]
cluster_addrs = ["%s"]

[[tasks]]
name = "sync"
every = "1h"
command = ["true"]
entities = ["1", "2"]
`, strings.Join(cl.Addrs()[:2], `", "`)))

	code, out, errs := cli("trigger", "-config", cfg, "-json", "sync")
	expect.Equal(t, "trigger exit status ("+errs+")", code, 0)
	checkSchema(t, out)

	code, out, errs = cli("status", "-config", cfg, "-json", "sync")
	expect.Equal(t, "status exit status ("+errs+")", code, 0)
	checkSchema(t, out)
	var st statusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Tasks) != 1 {
		t.Fatalf("status json %v: %s", err, out)
	}
	expect.Equal(t, "role", st.Replication.Role, "cluster")
	expect.Equal(t, "replicas online per master", st.Replication.ReplicasOnline, 1)
	expect.True(t, "a write now is acknowledged on every shard", st.Replication.Acknowledged && st.Replication.AcksNow == 1)
	expect.Equal(t, "the triggers are pending", st.Tasks[0].DueCount, 2)

	for _, c := range [][]string{{"pause", "sync"}, {"resume", "sync"}, {"lock", "k", "--", "true"}} {
		code, _, errs = cli(append([]string{c[0], "-config", cfg}, c[1:]...)...)
		expect.Equal(t, c[0]+" exit status ("+errs+")", code, 0)
	}
	code, _, _ = cli("unlock", "-config", cfg, "sync", "1")
	expect.Equal(t, "unlock of a lease nobody holds", code, 1)
	code, out, errs = cli("check", "-config", cfg, "-redis")
	expect.Equal(t, "check -redis exit status ("+errs+")", code, 0)
	expect.True(t, "check -redis names the cluster: "+out, strings.Contains(out, "cluster via"))
}
