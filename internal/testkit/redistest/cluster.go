package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// Cluster is a Redis Cluster on loopback: three masters, each with one
// replica, created with redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server // every node, masters and replicas, in creation order
}

// clusterNodeTimeout is the nodes' cluster-node-timeout: how long a master
// may not answer before its replica is promoted.
const clusterNodeTimeout = 2 * time.Second

// StartCluster starts six cluster nodes, creates the cluster (three masters,
// one replica each) and waits until every node sees every slot served.
// Nodes keep their cluster config across Restart; their data is not kept
// (a restarted master comes back empty). Everything stops when the test
// ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	tier.Full(t, "a Redis Cluster")
	cli := Tool(t, "redis-cli", "redis-cli not found on PATH: install it (Debian/Ubuntu: sudo apt-get install -y redis-tools)")
	c := &Cluster{}
	for range 6 {
		s := &Server{t: t, Dir: t.TempDir()}
		s.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
			// a shard that is down does not stop the others
			"--cluster-require-full-coverage", "no"}
		s.startOnNewPort(clusterPort)
		t.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		expect.Fatalf(t, "redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy(t)
	c.WaitInSync(t)
	return c
}

// WaitInSync waits until every master's replica acknowledges a write made
// on it: the replication stream flows (a replica reported online after its
// first sync may not get it for up to a second).
func (c *Cluster) WaitInSync(t testing.TB) {
	t.Helper()
	for _, m := range c.Masters(t) {
		key := ownKey(t, m.Addr)
		expect.WaitFor(t, 20*time.Second, "the replica of "+m.Addr+" in sync", func() bool {
			n, err := nodeCmd(m.Addr, func(ctx context.Context, r *redis.Client) (string, error) {
				pipe := r.Pipeline()
				pipe.Set(ctx, key, "1", time.Minute)
				wait := pipe.Do(ctx, "wait", 1, 200)
				if _, err := pipe.Exec(ctx); err != nil {
					return "", err
				}
				return fmt.Sprint(wait.Val()), nil
			})
			return err == nil && n == "1"
		})
	}
}

// ownKey finds a key the master at addr serves.
func ownKey(t testing.TB, addr string) string {
	t.Helper()
	for i := range 10000 {
		k := "redistest-marker-" + strconv.Itoa(i)
		if _, err := nodeCmd(addr, func(ctx context.Context, r *redis.Client) (string, error) {
			return "", r.Exists(ctx, k).Err()
		}); err == nil {
			return k
		}
	}
	expect.Fatalf(t, "no key served by %s", addr)
	return ""
}

// clusterPort finds a free port whose cluster bus port (port + 10000) is
// free too.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := FreePort(t)
		if p > 55535 {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000))); err == nil {
			l.Close()
			return p
		}
	}
	expect.Fatalf(t, "%v", "no free port pair for a cluster node")
	return 0
}

// Addrs are every node's address, as seed nodes for a client.
func (c *Cluster) Addrs() []string {
	as := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		as[i] = n.Addr
	}
	return as
}

// WaitHealthy waits until every running node says cluster_state:ok and
// every slot is served by a master that answers.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	expect.WaitFor(t, 30*time.Second, "the cluster to be healthy", func() bool {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			info, err := nodeCmd(n.Addr, func(ctx context.Context, r *redis.Client) (string, error) {
				return r.ClusterInfo(ctx).Result()
			})
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return false
			}
		}
		return true
	})
}

// Masters are the running nodes that are masters now.
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	var ms []*Server
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		role, err := nodeCmd(n.Addr, func(ctx context.Context, r *redis.Client) (string, error) {
			v, err := r.Do(ctx, "role").Slice()
			if err != nil || len(v) == 0 {
				return "", err
			}
			return fmt.Sprint(v[0]), nil
		})
		if err == nil && role == "master" {
			ms = append(ms, n)
		}
	}
	return ms
}

// MasterOf is the node that serves key's slot now, as the running nodes
// see it.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	for _, m := range c.Masters(t) {
		_, err := nodeCmd(m.Addr, func(ctx context.Context, r *redis.Client) (string, error) {
			return "", r.Do(ctx, "exists", key).Err() // MOVED unless m serves it
		})
		if err == nil {
			return m
		}
	}
	expect.Fatalf(t, "no master serves %s", key)
	return nil
}

// Slot is key's hash slot, as the cluster computes it.
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		s, err := nodeCmd(n.Addr, func(ctx context.Context, r *redis.Client) (string, error) {
			v, err := r.ClusterKeySlot(ctx, key).Result()
			return strconv.FormatInt(v, 10), err
		})
		if err == nil {
			n, _ := strconv.Atoi(s)
			return n
		}
	}
	expect.Fatalf(t, "%v", "no node answers CLUSTER KEYSLOT")
	return 0
}

// nodeCmd runs one command on the node at addr.
func nodeCmd(addr string, f func(ctx context.Context, r *redis.Client) (string, error)) (string, error) {
	r := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return f(ctx, r)
}
