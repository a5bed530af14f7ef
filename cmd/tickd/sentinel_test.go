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

// The operator commands reach Redis through Sentinel as the daemon does:
// trigger stores a due run on the primary, status reads it back with the
// replication line, pause and resume, lock runs its command, unlock says
// nothing is held, and check -redis connects.
func TestOperatorCommandsThroughSentinel(t *testing.T) {
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

	code, out, errs := cli("trigger", "-config", cfg, "-json", "sync", "1")
	expect.Equal(t, "trigger exit status ("+errs+")", code, 0)
	checkSchema(t, out)

	code, out, errs = cli("status", "-config", cfg, "-json", "sync")
	expect.Equal(t, "status exit status ("+errs+")", code, 0)
	checkSchema(t, out)
	var st statusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Tasks) != 1 {
		t.Fatalf("status json %v: %s", err, out)
	}
	expect.Equal(t, "role seen through Sentinel", st.Replication.Role, "master")
	expect.Equal(t, "replicas online", st.Replication.ReplicasOnline, 1)
	expect.True(t, "a write now is acknowledged", st.Replication.Acknowledged && st.Replication.AcksNow == 1)
	expect.Equal(t, "the trigger is pending", st.Tasks[0].DueCount, 1)

	for _, c := range [][]string{{"pause", "sync"}, {"resume", "sync"}, {"lock", "k", "--", "true"}} {
		code, _, errs = cli(append([]string{c[0], "-config", cfg}, c[1:]...)...)
		expect.Equal(t, c[0]+" exit status ("+errs+")", code, 0)
	}
	code, _, _ = cli("unlock", "-config", cfg, "sync", "1")
	expect.Equal(t, "unlock of a lease nobody holds", code, 1)
	code, out, errs = cli("check", "-config", cfg, "-redis")
	expect.Equal(t, "check -redis exit status ("+errs+")", code, 0)
	expect.True(t, "check -redis names the sentinel master: "+out, strings.Contains(out, `sentinel master "mymaster"`))
}
