package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/faultproxy"
)

// MasterName is the name the sentinels of StartReplicated monitor.
const MasterName = "mymaster"

// Replicated is a primary with one replica whose replication link runs
// through a proxy the test controls (Link: stall it, and the replica lags),
// and, if asked for, three sentinels that monitor the primary.
type Replicated struct {
	Primary, Replica *Server
	Link             *faultproxy.Proxy
	Sentinels        []*Server
}

// ReplicatedOptions tune StartReplicated.
type ReplicatedOptions struct {
	// Sentinels starts three sentinels (quorum 2) that fail over after the
	// primary has not answered for DownAfter (default 1s).
	Sentinels bool
	DownAfter time.Duration
}

// StartReplicated starts a primary and a replica (and sentinels) and waits
// until the replica is in sync and every sentinel knows both.
func StartReplicated(t testing.TB, o ReplicatedOptions) *Replicated {
	t.Helper()
	r := &Replicated{Primary: Start(t)}
	r.Link = faultproxy.Start(t, r.Primary.Addr)
	r.Replica = Start(t, Options{ReplicaOf: r.Link.Addr})
	r.WaitInSync(t)
	if !o.Sentinels {
		return r
	}
	if o.DownAfter <= 0 {
		o.DownAfter = time.Second
	}
	for range 3 {
		r.Sentinels = append(r.Sentinels, startSentinel(t, r.Primary.Addr, o.DownAfter))
	}
	expect.WaitFor(t, 20*time.Second, "the sentinels to know the replica and each other", func() bool {
		for _, s := range r.Sentinels {
			if !sentinelSees(s.Addr) {
				return false
			}
		}
		return true
	})
	return r
}

// WaitInSync waits until the replica is online and has every write the
// primary has: a marker written now has reached it. (After a first sync, a
// replica reported online may not get the stream for up to a second.)
func (r *Replicated) WaitInSync(t testing.TB) {
	t.Helper()
	p := redis.NewClient(&redis.Options{Addr: r.Primary.Addr})
	defer p.Close()
	rc := redis.NewClient(&redis.Options{Addr: r.Replica.Addr})
	defer rc.Close()
	mark := strconv.FormatInt(time.Now().UnixNano(), 10)
	expect.WaitFor(t, 20*time.Second, "the replica online", func() bool { return OnlineReplicas(r.Primary.Addr) == 1 })
	if err := p.Set(context.Background(), "redistest:sync", mark, 0).Err(); err != nil {
		expect.Fatalf(t, "write the sync marker: %v", err)
	}
	expect.WaitFor(t, 20*time.Second, "the replica in sync", func() bool {
		return rc.Get(context.Background(), "redistest:sync").Val() == mark
	})
}

// SentinelTOML is the [redis] keys that reach the primary through the
// sentinels: sentinel_master and sentinel_addrs.
func (r *Replicated) SentinelTOML() string {
	q := make([]string, len(r.Sentinels))
	for i, a := range r.SentinelAddrs() {
		q[i] = strconv.Quote(a)
	}
	return fmt.Sprintf("sentinel_master = %q\nsentinel_addrs = [%s]", MasterName, strings.Join(q, ", "))
}

// SentinelAddrs lists the sentinels' addresses.
func (r *Replicated) SentinelAddrs() []string {
	out := make([]string, len(r.Sentinels))
	for i, s := range r.Sentinels {
		out[i] = s.Addr
	}
	return out
}

func startSentinel(t testing.TB, primary string, downAfter time.Duration) *Server {
	t.Helper()
	s := &Server{t: t, Dir: t.TempDir(), port: FreePort(t)}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	host, port, _ := net.SplitHostPort(primary)
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
loglevel notice
sentinel monitor %s %s %s 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, s.port, s.Dir, MasterName, host, port, MasterName, downAfter.Milliseconds(), MasterName, MasterName)
	s.sentinel = filepath.Join(s.Dir, "sentinel.conf")
	if err := os.WriteFile(s.sentinel, []byte(conf), 0o600); err != nil {
		expect.Fatalf(t, "%v", err)
	}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// sentinelSees says whether a sentinel knows the replica and two other
// sentinels: only then can it agree to, and carry out, a failover.
func sentinelSees(addr string) bool {
	var m map[string]string
	err := askSentinel(addr, func(ctx context.Context, c *redis.SentinelClient) (err error) {
		m, err = c.Master(ctx, MasterName).Result()
		return err
	})
	if err != nil {
		return false
	}
	return m["num-slaves"] == "1" && m["num-other-sentinels"] == "2"
}

// askSentinel runs one question to the sentinel at addr, within a second.
func askSentinel(addr string, ask func(ctx context.Context, c *redis.SentinelClient) error) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return ask(ctx, c)
}

// MasterAddr is the primary's address as the sentinel at addr knows it.
func MasterAddr(addr string) string {
	var hp []string
	err := askSentinel(addr, func(ctx context.Context, c *redis.SentinelClient) (err error) {
		hp, err = c.GetMasterAddrByName(ctx, MasterName).Result()
		return err
	})
	if err != nil || len(hp) != 2 {
		return ""
	}
	return net.JoinHostPort(hp[0], hp[1])
}

// OnlineReplicas is how many replicas the server at addr reports online,
// or -1 when it does not answer.
func OnlineReplicas(addr string) int {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			n++
		}
	}
	return n
}

// Promote makes a replica a primary (REPLICAOF NO ONE), as a managed
// service does on failover.
func Promote(t testing.TB, s *Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	if err := c.ReplicaOf(context.Background(), "NO", "ONE").Err(); err != nil {
		expect.Fatalf(t, "promote %s: %v", s.Addr, err)
	}
}
