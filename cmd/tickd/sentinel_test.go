package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// The operator commands reach Redis through Sentinel as the daemon does:
// trigger stores a due run on the primary, status reads it back with the
// replication line, pause and resume, lock runs its command, unlock says
// nothing is held, and check -redis connects.
func TestOperatorCommandsThroughSentinel(t *testing.T) {
	t.Parallel()
	pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{Sentinels: true})
	tickdtest.InitEpoch(t, pair.Primary.Addr, "tickd")
	cfg := filepath.Join(t.TempDir(), "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[redis]
%s

[[tasks]]
name = "sync"
every = "1h"
command = ["true"]
entities = ["1"]
`, pair.SentinelTOML()))

	operatorCommands(t, cfg, "master", `sentinel master "mymaster"`, 1, "1")
}

// operatorCommands runs every operator command against cfg's Redis, whose
// replication role is role (one replica online, acknowledging), and whose
// check -redis output names where: trigger (of the entities given, pending
// of them), status -json, pause, resume, lock, unlock and check -redis.
func operatorCommands(t *testing.T, cfg, role, where string, pending int, entities ...string) {
	t.Helper()
	code, out, errs := cli(append([]string{"trigger", "-config", cfg, "-json", "sync"}, entities...)...)
	expect.Equal(t, "trigger exit status ("+errs+")", code, 0)
	checkSchema(t, out)

	code, out, errs = cli("status", "-config", cfg, "-json", "sync")
	expect.Equal(t, "status exit status ("+errs+")", code, 0)
	checkSchema(t, out)
	var st report.StatusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Tasks) != 1 {
		t.Fatalf("status json %v: %s", err, out)
	}
	expect.Equal(t, "replication role", st.Replication.Role, role)
	expect.Equal(t, "replicas online", st.Replication.ReplicasOnline, 1)
	expect.True(t, "a write now is acknowledged", st.Replication.Acknowledged && st.Replication.AcksNow == 1)
	expect.Equal(t, "the triggers are pending", st.Tasks[0].DueCount, pending)

	for _, c := range [][]string{{"pause", "sync"}, {"resume", "sync"}, {"lock", "k", "--", "true"}} {
		code, _, errs = cli(append([]string{c[0], "-config", cfg}, c[1:]...)...)
		expect.Equal(t, c[0]+" exit status ("+errs+")", code, 0)
	}
	code, _, _ = cli("unlock", "-config", cfg, "sync", "1")
	expect.Equal(t, "unlock of a lease nobody holds", code, 1)
	code, out, errs = cli("check", "-config", cfg, "-redis")
	expect.Equal(t, "check -redis exit status ("+errs+")", code, 0)
	expect.True(t, "check -redis names "+where+": "+out, strings.Contains(out, where))
}
