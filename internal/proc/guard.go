package proc

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The guardian makes a run's processes die with tickd, all of them.
//
// A run's command is started with Pdeathsig, so the kernel kills it when
// tickd dies, even by kill -9; but Pdeathsig reaches that one process, not
// the processes it started: a script's `sleep`, `curl` or subshell would
// run on, reparented to PID 1, without a lease, while another replica runs
// the entity again. Every run's command leads its own process group, which
// its children join, so a kill of the group takes them all; tickd cannot
// send it once it is dead. The guardian can: a small process tickd starts
// (this binary again, started with guardEnv: its init runs guard and
// exits), which reads the process groups of the runs going on from a pipe,
// "+PGID" when a run starts and "-PGID" when it ended. The pipe's write
// end is tickd's alone (close-on-exec: no run inherits it), so the kernel
// closes it when tickd dies, however it dies: the guardian reads the end
// of its input, sends SIGKILL to every group still registered, and exits.
// When tickd stops as it should, the pipe closes with no group left.
//
// What escapes: a process that leaves the run's group (setsid, setpgid: a
// daemon that detaches on purpose), and one started in the moment between
// the command's exec and its registration, if tickd dies in that moment.
// Under systemd the unit's cgroup is cleaned too (KillMode).
const guardEnv = "TICKD_PROC_GUARD"

func init() {
	if os.Getenv(guardEnv) == "" {
		return
	}
	// The guardian outlives tickd by a moment: the signals a terminal or a
	// stop sends to tickd are not for it (it ends when its input does).
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	guard(os.Stdin, func(pgid int) { syscall.Kill(-pgid, syscall.SIGKILL) }) //nolint:errcheck // gone already
	os.Exit(0)
}

// guard reads "+PGID" and "-PGID" lines from r until it ends, then kills
// every group added and not removed since.
func guard(r io.Reader, kill func(pgid int)) {
	live := map[int]int{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			live[pgid]++
		case '-':
			if live[pgid]--; live[pgid] <= 0 {
				delete(live, pgid)
			}
		}
	}
	for pgid := range live {
		kill(pgid)
	}
}

// runGuardian is this process's guardian: started at the first run, and
// started again if it died (its groups registered again).
type runGuardian struct {
	mu   sync.Mutex
	w    *os.File    // the pipe to it; nil until started, or since it failed
	live map[int]int // the groups registered, to register again after a restart
	err  error       // the last start's failure, said once (GuardianErr)
	said bool
	// retryAt: a start that failed is not tried again before it, so
	// that a machine that cannot fork one more process is not asked at
	// every run.
	retryAt time.Time
	exe     string // "": this binary (a test's guardian may be another)
}

// guardianRetry is how long a guardian that could not be started is left
// unstarted.
const guardianRetry = time.Minute

// guardian is the one every run registers with.
var guardian runGuardian

// add registers pgid; the group is killed if this process dies before
// remove. A guardian that cannot be started leaves the run to Pdeathsig
// alone; GuardianErr says why.
func (g *runGuardian) add(pgid int) { g.send('+', pgid) }

// ready starts the guardian if it is not running (and may be tried).
func (g *runGuardian) ready() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		g.start()
	}
}

// remove unregisters pgid.
func (g *runGuardian) remove(pgid int) { g.send('-', pgid) }

func (g *runGuardian) send(op byte, pgid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.live == nil {
		g.live = map[int]int{}
	}
	if op == '+' {
		g.live[pgid]++
	} else if g.live[pgid]--; g.live[pgid] <= 0 {
		delete(g.live, pgid)
	}
	if g.w == nil && op == '+' {
		g.start()
		return // start registered every live group, this one too (when it started)
	}
	if g.w == nil {
		return
	}
	if _, err := fmt.Fprintf(g.w, "%c%d\n", op, pgid); err != nil {
		// It died (killed on its own): a new one takes the live groups.
		g.w.Close()
		g.w = nil
		if op == '+' || len(g.live) > 0 {
			g.start()
		}
	}
}

// start starts the guardian and registers the live groups with it; g.mu
// is held.
func (g *runGuardian) start() {
	if time.Now().Before(g.retryAt) {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		g.failed(err)
		return
	}
	defer r.Close()
	cmd := exec.Command(cmp.Or(g.exe, "/proc/self/exe"))
	cmd.Args = []string{"tickd-guardian"}
	cmd.Env = append(os.Environ(), guardEnv+"=1")
	cmd.Stdin = r
	// Its own group: a stop of a run's group, or a terminal's ^C, is not
	// for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		g.failed(fmt.Errorf("start the run guardian: %w", err))
		return
	}
	go cmd.Wait() //nolint:errcheck // reaped; a new one starts when a write fails
	for pgid, n := range g.live {
		for range n {
			if _, err := fmt.Fprintf(w, "+%d\n", pgid); err != nil {
				w.Close()
				g.failed(fmt.Errorf("the run guardian died as it started: %w", err))
				return
			}
		}
	}
	g.w, g.err, g.said = w, nil, false // a later failure is said again
}

// failed notes a start that failed; g.mu is held.
func (g *runGuardian) failed(err error) {
	g.err, g.retryAt = err, time.Now().Add(guardianRetry)
}

// GuardianErr says why the guardian could not be started, once: nil when
// it runs, or was never needed, or the error was said already.
func GuardianErr() error {
	guardian.mu.Lock()
	defer guardian.mu.Unlock()
	if guardian.err == nil || guardian.said {
		return nil
	}
	guardian.said = true
	return guardian.err
}
