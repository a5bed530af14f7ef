package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// The operator commands on a Redis Cluster: trigger stores a due run in
// the task's bucket, status finds it (scanning every master) with the
// replication line, pause and resume, lock runs its command, unlock says
// nothing is held, and check -redis connects.
func TestOperatorCommandsOnCluster(t *testing.T) {
	t.Parallel()
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

	operatorCommands(t, cfg, "cluster", "cluster via", 2)
}
