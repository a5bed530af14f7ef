package redisdriver

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis server that restarted may have loaded an older snapshot, which
// holds an epoch, leases and tick records that look intact: each epoch
// keeps the run_id of the server that checked it, and another one is a
// loss (lib.lua's quarantine). A replica promoted in the server's place is
// another server too, but not a loss: it had every grant its replicas
// acknowledged. So the store reads, for each server (the Redis, or each
// Cluster master), its replicas' run_ids (the primary's INFO replication
// lists where they are; each one's INFO server says its run_id) and
// records them in the epochs of the server's buckets (successors.lua):
// at the store's first grant, then every successorsEvery. A replica the
// store cannot reach (another network, a TLS name that does not match),
// or one that joined since the last reading, is not recorded: its
// promotion is taken for a restart, which costs a quarantine, not safety.

// successorsEvery is how often each server's replicas are read again.
const successorsEvery = 5 * time.Second

// successorsTimeout bounds one reading of a server's replicas.
const successorsTimeout = 2 * time.Second

// successors is what the store last recorded, by server address.
type successors struct {
	mu   sync.Mutex
	last time.Time
	runs map[string]string // primary address → its replicas' run_ids, comma-joined
}

// recordSuccessors reads every server's replicas and records their run_ids
// in its buckets' epochs, when they changed; at most every successorsEvery
// unless now.
func (b *redisDriver) recordSuccessors(ctx context.Context, now bool) {
	b.succ.mu.Lock()
	defer b.succ.mu.Unlock()
	if !now && time.Since(b.succ.last) < successorsEvery {
		return
	}
	b.succ.last = time.Now()
	if b.succ.runs == nil {
		b.succ.runs = map[string]string{}
	}
	ctx, cancel := context.WithTimeout(ctx, successorsTimeout)
	defer cancel()
	for primary, bks := range b.servers(ctx) {
		runs := replicaRuns(ctx, primary)
		addr := primary.Options().Addr
		if runs == b.succ.runs[addr] {
			continue
		}
		calls := make([]scriptCall, len(bks))
		for i, bk := range bks {
			calls[i] = scriptCall{keys: []string{b.k.epoch(bk)}, args: []any{runs}}
		}
		failed := false
		for _, cmd := range evalEach(ctx, b.c, scriptSucc(), calls) {
			failed = failed || cmd.Err() != nil
		}
		if !failed {
			b.succ.runs[addr] = runs
		}
	}
}

// servers maps each server's client to the buckets it holds: the one
// Redis, all of them; on a Cluster, each master, its buckets. Another kind
// of client has none: its replicas are not read.
func (b *redisDriver) servers(ctx context.Context) map[*redis.Client][]int {
	all := make([]int, buckets)
	for bk := range all {
		all[bk] = bk
	}
	switch c := b.c.(type) {
	case *redis.Client:
		return map[*redis.Client][]int{c: all}
	case *redis.ClusterClient:
		m := map[*redis.Client][]int{}
		for _, bk := range all {
			if node, err := c.MasterForKey(ctx, b.k.epoch(bk)); err == nil {
				m[node] = append(m[node], bk)
			}
		}
		return m
	}
	return nil
}

// replicaRuns is the run_ids of primary's replicas it can reach, sorted
// and comma-joined.
func replicaRuns(ctx context.Context, primary *redis.Client) string {
	info, err := primary.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	var runs []string
	for _, addr := range replicaAddrs(info) {
		if run := runOf(ctx, primary.Options(), addr); run != "" {
			runs = append(runs, run)
		}
	}
	slices.Sort(runs)
	return strings.Join(runs, ",")
}

// replicaAddrs reads the replicas' addresses from an INFO replication
// reply ("slave0:ip=10.0.0.2,port=6379,state=online,…").
func replicaAddrs(info string) []string {
	var addrs []string
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "slave") || k == "slave_read_repl_offset" {
			continue
		}
		var ip, port string
		for f := range strings.SplitSeq(v, ",") {
			if val, ok := strings.CutPrefix(f, "ip="); ok {
				ip = val
			} else if val, ok := strings.CutPrefix(f, "port="); ok {
				port = val
			}
		}
		if ip != "" && port != "" {
			addrs = append(addrs, joinHostPort(ip, port))
		}
	}
	return addrs
}

// joinHostPort is host:port, an IPv6 host in brackets.
func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// runOf is the run_id of the server at addr, reached as the primary is
// (its credentials and TLS, not its dialer: a Sentinel client's dials the
// primary), or "" when it does not answer.
func runOf(ctx context.Context, o *redis.Options, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: o.Protocol, Username: o.Username, Password: o.Password,
		CredentialsProvider: o.CredentialsProvider, TLSConfig: o.TLSConfig, DialTimeout: successorsTimeout,
		ReadTimeout: successorsTimeout, WriteTimeout: successorsTimeout, PoolSize: 1, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for line := range strings.Lines(info) {
		if run, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok && isHex(run) {
			return run
		}
	}
	return ""
}
