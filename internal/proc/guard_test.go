package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

func TestGuardKillsWhatIsLeftAtTheEnd(t *testing.T) {
	t.Parallel()
	in := "+10\n+11\n-10\n+12\n+12\n-12\nnoise\n+1\n+x\n-99\n"
	var killed []int
	guard(strings.NewReader(in), func(pgid int) { killed = append(killed, pgid) })
	slices.Sort(killed)
	expect.True(t, fmt.Sprintf("groups killed %v: want 11 and 12, not 10 (removed), 1 or a line that is no group", killed), slices.Equal(killed, []int{11, 12}))
}

// helperEnv makes this test binary a process that starts a run's command
// (the args after --) through StartTail and waits: the test kills it -9.
const helperEnv = "PROC_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		cmd := exec.Command(os.Args[len(os.Args)-1])
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		StartTail(context.Background(), cmd, time.Second, nil, nil, nil) //nolint:errcheck
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunsGrandchildrenDieWithTheProcess: a process running a command
// whose own children sleep (a script's subshell) is killed -9; the
// command dies by Pdeathsig and its children by the guardian, within a
// second, not when their sleep ends.
func TestRunsGrandchildrenDieWithTheProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	pids := filepath.Join(dir, "pids")
	body := "#!/bin/sh\n(sleep 30; true) &\nsleep 30 &\necho \"$$ $!\" > " + pids + ".tmp && mv " + pids + ".tmp " + pids + "\nwait\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^$", "--", script)
	helper.Env = append(os.Environ(), helperEnv+"=1")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var group []int
	expect.WaitFor(t, 10*time.Second, "the script's children started", func() bool {
		b, err := os.ReadFile(pids)
		if err != nil {
			return false
		}
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			group = append(group, n)
		}
		return true
	})
	t.Cleanup(func() { syscall.Kill(-group[0], syscall.SIGKILL) }) //nolint:errcheck // gone, unless the test failed
	// Every process of the script's group, children included.
	members := func() []int {
		var out []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if pg, err := syscall.Getpgid(pid); err == nil && pg == group[0] {
				if b, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); !strings.Contains(string(b), ") Z ") {
					out = append(out, pid)
				}
			}
		}
		return out
	}
	expect.True(t, "the group has the script and its children", len(members()) >= 3)
	helper.Process.Kill() //nolint:errcheck // -9
	helper.Wait()         //nolint:errcheck
	killed := time.Now()
	expect.WaitFor(t, 5*time.Second, "every process of the run's group gone", func() bool { return len(members()) == 0 })
	if d := time.Since(killed); d > time.Second {
		t.Errorf("the run's group outlived the kill by %v, want at most 1s", d)
	}
}

// TestGuardianThatCannotStartIsNotAskedAtEveryRun: a guardian that could
// not be started is said once, and not tried again before guardianRetry;
// then it is, and takes the groups registered meanwhile.
func TestGuardianThatCannotStartIsNotAskedAtEveryRun(t *testing.T) {
	g := &runGuardian{exe: filepath.Join(t.TempDir(), "missing")}
	g.add(1 << 30)
	expect.True(t, "the failed start is kept", g.err != nil && g.w == nil)
	g.exe = "/bin/cat" // would start now: it reads the pipe until it closes
	g.add(1<<30 + 1)
	expect.True(t, "no start is tried again before guardianRetry", g.w == nil && g.err != nil)
	g.retryAt = time.Time{}
	g.ready()
	expect.True(t, "once it may be tried, it starts", g.w != nil && g.err == nil)
	g.remove(1 << 30)
	g.remove(1<<30 + 1)
	expect.Equal(t, "the groups registered", len(g.live), 0)
	g.w.Close()
}
