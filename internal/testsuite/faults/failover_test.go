package faults

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/faultproxy"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// haTTL is the lease TTL of the failover scenarios: longer than a Sentinel
// promotion plus the freeze, so that the frozen replica's runs go on under
// leases that are still theirs (what is tested is the failover, not a
// freeze past the lease: TestSIGSTOP does that).
const haTTL = 9 * time.Second

// failover is what a failover scenario measured.
type failover struct {
	stalled, killed, promoted time.Time
}

// failOverLagging runs the fault of the failover scenarios: just before a
// tick the replication link stalls, so that the tick's grants reach the
// primary alone; right after the tick the primary is killed (kill -9) and a
// tickd replica frozen (SIGSTOP) until after the promotion, which promote
// carries out (or waits for) and returns the new primary's address.
func (c *cluster) failOverLagging(pair *redistest.Replicated, promote func() string) *failover {
	now := time.Now()
	T := now.Truncate(every).Add(2 * every)
	f := &failover{}
	sleepUntil(T.Add(-300 * time.Millisecond))
	f.stalled = time.Now()
	pair.Link.Stall()
	sleepUntil(T.Add(400 * time.Millisecond)) // the tick's grants are made
	frozen := c.reps[0]
	frozen.proc.Signal(syscall.SIGSTOP)
	f.killed = time.Now()
	pair.Primary.Stop()
	pair.Link.Cut() // what the replica had not received is lost with the primary
	c.fault()
	addr := promote()
	f.promoted = time.Now()
	c.failedOver(addr)
	sleepUntil(f.promoted.Add(500 * time.Millisecond))
	frozen.proc.Signal(syscall.SIGCONT)
	c.mu.Lock()
	c.linger[frozen.proc.Pid()] = interval{f.killed, time.Now()}
	// What the primary took during the stall is lost with it: a tick's
	// heartbeat claims and its records among it, as in a data loss (no
	// quarantine: the replica keeps tickd's state). Before, a slow machine
	// sent a tick's end ping in the stall, and another replica, its claim
	// gone, sent it again: judged wrong.
	c.losses = append(c.losses, f.killed)
	c.mu.Unlock()
	// Liveness is not expected from the stall until the new primary serves.
	c.blackout(f.stalled, time.Now().Add(every))
	return f
}

// resumedAfter is how long after at the first run started.
func (c *cluster) resumedAfter(at time.Time) time.Duration {
	first := int64(0)
	for _, r := range tickdtest.ReadRuns(c.t, c.runsLog) {
		if r.Start.At > at.UnixNano() && (first == 0 || r.Start.At < first) {
			first = r.Start.At
		}
	}
	if first == 0 {
		return -1
	}
	return time.Duration(first - at.UnixNano())
}

func (f *failover) extra(c *cluster) string {
	return fmt.Sprintf("kill_to_promotion=%v promotion_to_first_run=%v", f.promoted.Sub(f.killed).Round(time.Millisecond),
		c.resumedAfter(f.promoted).Round(time.Millisecond))
}

// TestSentinelFailoverToALaggingReplica: tickd reaches Redis through three
// sentinels; the primary dies with the tick's grants not yet replicated,
// and Sentinel promotes the lagging replica. No grant the replica lacks was
// trusted, so nothing runs twice; the replicas follow the new primary.
func TestSentinelFailoverToALaggingReplica(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{Sentinels: true})
	c := newClusterOn(t, pair.Primary, pair.SentinelTOML(), haTTL)
	var f *failover
	r := c.run(func(c *cluster, until time.Time) {
		f = c.failOverLagging(pair, func() string {
			var addr string
			expect.WaitFor(t, 60*time.Second, "Sentinel to promote the replica", func() bool {
				addr = redistest.MasterAddr(pair.Sentinels[0].Addr)
				return addr == pair.Replica.Addr
			})
			return addr
		})
		sleepUntil(f.promoted.Add(haTTL + 5*every)) // ticks whose window is clear of the fault
	})
	r.extra = f.extra(c)
	report(t, "sentinel failover", r)
	guaranteesHold(t, r, false)
	expectResumed(t, f, c)
}

// TestEndpointFailoverToALaggingReplica: tickd reaches Redis at one address
// (a managed service's primary endpoint) with a plain url and no
// replica_acks key; on failover the replica is promoted and the address
// moves to it half a second later. The default waits for the replica, so
// nothing runs twice. TICKD_FAULTS_REPLICA_ACKS=0 runs the same scenario
// without acknowledgement, to see the checker catch the failover bug.
func TestEndpointFailoverToALaggingReplica(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
	endpoint := faultproxy.Start(t, pair.Primary.Addr)
	redis := fmt.Sprintf("url = %q", "redis://"+endpoint.Addr+"/0")
	acks := os.Getenv("TICKD_FAULTS_REPLICA_ACKS")
	if acks != "" {
		redis += "\nreplica_acks = " + acks
	}
	c := newClusterOn(t, pair.Primary, redis, haTTL)
	g := c.writeThroughGuards(everyTenth()...)
	var f *failover
	r := c.run(func(c *cluster, until time.Time) {
		f = c.failOverLagging(pair, func() string {
			redistest.Promote(t, pair.Replica)
			sleepUntil(time.Now().Add(500 * time.Millisecond))
			endpoint.Retarget(pair.Replica.Addr)
			endpoint.Cut()
			return pair.Replica.Addr
		})
		sleepUntil(f.promoted.Add(haTTL + 5*every)) // ticks whose window is clear of the fault
	})
	r.extra = f.extra(c)
	g.judgeGuards(c, &r)
	if acks != "" {
		report(t, "endpoint failover acks="+acks, r)
		return // a demonstration: its figures are the point
	}
	report(t, "endpoint failover", r)
	guaranteesHold(t, r, false)
	expectResumed(t, f, c)
}

func expectResumed(t *testing.T, f *failover, c *cluster) {
	t.Helper()
	if d := c.resumedAfter(f.promoted); d < 0 || d > 5*time.Second {
		failf(t, "runs resumed %v after the promotion, want within 5s", d)
	}
}

// TestReplicaGoneForGood: the only replica dies and stays dead. With
// replica_acks = "auto", runs go on as soon as the primary reports it gone;
// with replica_acks = 1, nothing new starts, and the reason is logged.
// What tickd logs when the Redis replicas stop and start acknowledging.
const (
	msgNotAcknowledged   = "redis replicas do not acknowledge lease writes: nothing new starts, and runs stop when their leases can no longer be trusted, until they do (replica_acks in docs/operations.md)"
	msgAcknowledgedAgain = "redis replicas acknowledge lease writes again"
)

func TestReplicaGoneForGood(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	t.Run("auto", func(t *testing.T) {
		pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
		c := newClusterOn(t, pair.Primary, fmt.Sprintf("url = %q", pair.Primary.URL()), leaseTTL)
		r := c.run(func(c *cluster, until time.Time) {
			sleepUntil(time.Now().Add(3 * time.Second))
			at := time.Now()
			pair.Replica.Stop()
			c.fault()
			expect.WaitFor(t, 10*time.Second, "the primary to report the replica gone", func() bool {
				return redistest.OnlineReplicas(pair.Primary.Addr) == 0
			})
			c.blackout(at, time.Now().Add(time.Second))
			sleepUntil(until)
		})
		report(t, "replica gone, acks auto", r)
		guaranteesHold(t, r, false)
	})
	t.Run("fixed", func(t *testing.T) {
		pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
		c := newClusterOn(t, pair.Primary, fmt.Sprintf("url = %q\nreplica_acks = 1", pair.Primary.URL()), leaseTTL)
		for _, r := range c.reps {
			c.start(r)
		}
		expect.WaitFor(t, 30*time.Second, "first full tick", func() bool { return len(tickdtest.ReadRuns(t, c.runsLog)) >= nEntities })
		pair.Replica.Stop()
		gone := time.Now()
		// Runs granted before the replica died may still start, within
		// one trust window; after that nothing starts.
		quiet := gone.Add(leaseTTL)
		sleepUntil(quiet.Add(3 * every)) // the fault's span: three ticks after the last run could start
		late := 0
		for _, run := range tickdtest.ReadRuns(t, c.runsLog) {
			if run.Start.At > quiet.UnixNano() {
				late++
			}
		}
		if late != 0 {
			failf(t, "%d runs started after the replica was gone with replica_acks = 1", late)
		}
		// Each replica logs the reason once, not per write: once per
		// change of state, ending in "do not acknowledge" (a dying replica
		// may still acknowledge some writes late, and then the line comes
		// again after an "again").
		logged := 0
		for _, rep := range c.reps {
			gone, back := 0, 0
			for rec := range tickdtest.LogLines(tickdtest.Logs(rep.proc), msgNotAcknowledged, msgAcknowledgedAgain) {
				if rec.Msg == msgNotAcknowledged {
					gone++
				} else {
					back++
				}
			}
			if gone == 0 || gone != back+1 {
				failf(t, "%s logged %d times that the replicas do not acknowledge and %d times that they do again, want once more the first", rep.name, gone, back)
			}
			logged += min(gone, 1)
		}
		for _, rep := range c.reps {
			c.mu.Lock()
			c.stopping[rep.proc.Pid()] = time.Now().UnixNano()
			c.mu.Unlock()
			rep.proc.Signal(syscall.SIGTERM)
			rep.proc.Wait(30 * time.Second)
		}
		t.Logf("replica gone, acks 1: runs started after the trust window: %d; replicas that logged the reason: %d of %d", late, logged, len(c.reps))
	})
}

// TestSentinelPrimaryRestartedFromAnOlderSnapshot: through three
// sentinels, the primary is killed and restarted at once from an RDB file a
// tick and a half old (faster than the sentinels' down-after: no
// failover), and its replica syncs from it. Its epoch looks intact; its
// run_id is not one the epoch knows, nor its replica's: quarantined as a
// loss, no tick runs twice and no entity at once.
func TestSentinelPrimaryRestartedFromAnOlderSnapshot(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{Sentinels: true})
	c := newClusterOn(t, pair.Primary, pair.SentinelTOML(), leaseTTL)
	r := c.run(func(c *cluster, until time.Time) { c.rollBack(pair.Primary, until) })
	report(t, "sentinel primary from an older snapshot", r)
	guaranteesHold(t, r, false)
}
