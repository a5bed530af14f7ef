package e2ebench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
)

// BenchmarkClusterTick runs one task of E2E_ENTITIES (1,000,000) entities on
// a 3-master Redis Cluster (one replica each, every batch acknowledged per
// shard), in E2E_SHARDS shards (16), with 1, 3 and 6 replicas in turn
// (E2E_CLUSTER_REPLICAS), on a schedule of E2E_EVERY seconds (30), and
// reports for each the busiest
// master's share of the Redis CPU, and the calls and Redis CPU per run over
// all the masters (docs/performance.md, "Redis Cluster"):
//
//	go test -run XXX -bench ClusterTick -benchtime 1x -timeout 60m ./cmd/tickd/internal/e2ebench
//
// Each entity must run exactly once per tick.
func BenchmarkClusterTick(b *testing.B) {
	cl := redistest.StartCluster(b)
	var masters []string
	for _, m := range cl.Masters(b) {
		masters = append(masters, m.Addr)
	}
	tgt := target{nodes: masters, newClient: func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 64})
	}, shards: envInt("E2E_SHARDS", 16)}
	ids := entityIDs(envInt("E2E_ENTITIES", 1_000_000))
	ticks, every := envInt("E2E_TICKS", 2), time.Duration(envInt("E2E_EVERY", 30))*time.Second
	counts := []int{1, 3, 6}
	if v := os.Getenv("E2E_CLUSTER_REPLICAS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("E2E_CLUSTER_REPLICAS=%q: a list of replica counts, such as 1,3,6", v)
			}
			counts = append(counts, n)
		}
	}
	for range b.N {
		for _, n := range counts {
			s := runTickd(b, tgt, ids, n, ticks, every)
			b.Logf("tickd, %d replica(s) on %d masters, %d shard(s): %v; busiest master %.0f%% (Redis CPU by master, µs/run: %s)",
				n, len(masters), tgt.shards, s, 100*s.busiest(), perNode(s))
			name := fmt.Sprintf("r%d-", n)
			b.ReportMetric(s.busiest(), name+"busiest-share")
			b.ReportMetric(float64(s.commands)/float64(s.runs), name+"cmds/run")
			b.ReportMetric(s.redisUS/float64(s.runs), name+"redis-µs/run")
			b.ReportMetric(s.median().Seconds(), name+"s/tick")
			if s.dup+s.lost > 0 {
				b.Errorf("%d replicas: runs not exactly once per tick: dup %d, lost %d", n, s.dup, s.lost)
			}
		}
	}
}

// perNode is each node's Redis CPU per run, in the order sampled.
func perNode(s side) string {
	var out []string
	for _, us := range s.byNode {
		out = append(out, fmt.Sprintf("%.2f", us/float64(s.runs)))
	}
	return strings.Join(out, " ")
}
