package tickdtest

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// WorkerStartCPU is the CPU time one start of the test worker costs on
// this machine, the mean of n starts that write to /dev/null and exit: the
// exec, the page faults and the Go runtime's start, the worker's and the
// kernel's time for it. Taken from the children's resource usage, it is
// CPU time, not the time it took: another process's load stretches the
// second, not much the first. Call it before the tests start processes
// of their own (a TestMain): it counts every child reaped meanwhile.
func WorkerStartCPU(n int) (time.Duration, error) {
	if err := build(); err != nil {
		return 0, err
	}
	worker := filepath.Join(buildDir, "testworker")
	before := childrenCPU()
	for range n {
		cmd := exec.Command(worker, "0s")
		cmd.Env = []string{"TESTWORKER_LOG=/dev/null"}
		if err := cmd.Run(); err != nil {
			return 0, err
		}
	}
	return (childrenCPU() - before) / time.Duration(n), nil
}

// childrenCPU is the CPU time of this process's reaped children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) //nolint:errcheck // RUSAGE_CHILDREN is valid
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
