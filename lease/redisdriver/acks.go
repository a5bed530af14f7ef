package redisdriver

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// ackWaitMax bounds one WAIT: a write the replicas lack after this long is
// refused rather than delaying the batch further.
const ackWaitMax = time.Second

// ackWait is how long a batch of leases of the shortest ttl waits for
// acknowledgement: a tenth of the TTL eats little of the trust window.
func ackWait(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), ackWaitMax)
}

// onlineFresh is how long AcksAuto trusts its count of online replicas.
const onlineFresh = time.Second

// acker asks the primary for acknowledgement of a batch's writes: one WAIT
// in the batch's pipeline, on the batch's connection.
type acker struct {
	mode driver.ReplicaAcks

	mu     sync.Mutex
	online int // AcksAuto: replicas the primary reported online
	readAt time.Time
}

// want is the count the next batch waits for, and whether the batch should
// refresh the online count (AcksAuto only).
func (a *acker) want() (n int, refresh bool) {
	if a.mode < 0 {
		return 0, false
	}
	if a.mode > 0 {
		return int(a.mode), false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.online, a.readAt.IsZero() || time.Since(a.readAt) > onlineFresh
}

func (a *acker) setOnline(n int) {
	a.mu.Lock()
	a.online, a.readAt = n, time.Now()
	a.mu.Unlock()
}

// onlineReplicas counts the replicas an INFO replication text reports
// online (a replica still in its first sync acknowledges nothing).
func onlineReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			n++
		}
	}
	return n
}

// ackRound is the acknowledgement part of one pipeline.
type ackRound struct {
	a      *acker
	want   int
	within time.Duration
	wait   *redis.Cmd
	info   *redis.StringCmd
}

// queue adds, after the batch's scripts, a WAIT for the replicas (and, for
// AcksAuto, an INFO replication when the count is stale). A first batch
// under AcksAuto reads the count before it can know what to wait for.
func (a *acker) queue(ctx context.Context, c redis.Cmdable, pipe redis.Pipeliner, within time.Duration) (*ackRound, error) {
	if a == nil || a.mode < 0 {
		return nil, nil
	}
	if a.mode == driver.AcksAuto && a.readAtZero() {
		if err := a.refresh(ctx, c); err != nil {
			return nil, err
		}
	}
	want, refresh := a.want()
	r := &ackRound{a: a, want: want, within: within}
	if refresh {
		r.info = pipe.Info(ctx, "replication")
	}
	if want > 0 {
		r.wait = pipe.Do(ctx, "wait", want, within.Milliseconds())
	}
	return r, nil
}

func (a *acker) readAtZero() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.readAt.IsZero()
}

func (a *acker) refresh(ctx context.Context, c redis.Cmdable) error {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	a.setOnline(onlineReplicas(info))
	return nil
}

// check says whether the round's writes were acknowledged as required. A
// shortfall under AcksAuto is measured again against the primary's current
// count: a replica that went away is no longer waited for.
func (r *ackRound) check(ctx context.Context, c redis.Cmdable) error {
	if r == nil {
		return nil
	}
	if r.info != nil && r.info.Err() == nil {
		r.a.setOnline(onlineReplicas(r.info.Val()))
	}
	if r.wait == nil {
		return nil
	}
	got, err := r.wait.Int64()
	if err != nil {
		return err
	}
	if int(got) >= r.want {
		return nil
	}
	want := r.want
	if r.a.mode == driver.AcksAuto {
		if r.info == nil {
			if err := r.a.refresh(ctx, c); err != nil {
				return err
			}
		}
		if want, _ = r.a.want(); int(got) >= want {
			return nil
		}
	}
	return &driver.AckError{Want: want, Got: int(got), Within: r.within}
}

// Replication probes the replicas: one small write (a key that expires in a
// minute) and one WAIT, as a lease write does.
func (b *redisDriver) Replication(ctx context.Context) (driver.Replication, error) {
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		return b.clusterReplication(ctx, cc)
	}
	info, err := b.c.Info(ctx, "replication").Result()
	if err != nil {
		return driver.Replication{}, err
	}
	r := driver.Replication{Mode: b.acksMode, Online: onlineReplicas(info)}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			r.Role = v
		}
	}
	if b.acks == nil {
		return r, nil
	}
	b.acks.setOnline(r.Online)
	r.Want, _ = b.acks.want()
	pipe := b.c.Pipeline()
	pipe.Set(ctx, b.k.probe(), b.cfg.Replica, time.Minute)
	round, err := b.acks.queue(ctx, b.c, pipe, ackWaitMax)
	if err != nil {
		return r, err
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return r, err
	}
	got := 0
	if round != nil && round.wait != nil {
		n, _ := round.wait.Int64()
		got = int(n)
	}
	return probed(r, round.check(ctx, b.c), got)
}

// clusterReplication is Replication on a Redis Cluster: Role "cluster",
// Online the fewest replicas any master reports online, and a probe write
// into every bucket, acknowledged per shard as lease writes are.
func (b *redisDriver) clusterReplication(ctx context.Context, cc *redis.ClusterClient) (driver.Replication, error) {
	r := driver.Replication{Role: "cluster", Mode: b.acksMode, Online: -1}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		n := onlineReplicas(info)
		if b.acks != nil {
			b.ackerFor(node.Options().Addr).setOnline(n)
		}
		mu.Lock()
		if r.Online < 0 || n < r.Online {
			r.Online = n
		}
		mu.Unlock()
		return nil
	})
	if err != nil || b.acks == nil {
		return r, err
	}
	r.Want = r.Online
	if b.acks.mode > 0 {
		r.Want = int(b.acks.mode)
	}
	calls := make([]scriptCall, buckets)
	for bk := range calls {
		calls[bk] = scriptCall{keys: []string{b.k.bucket(bk) + ":ackprobe"}, args: []any{b.cfg.Replica}}
	}
	_, err = b.evalBatch(ctx, scriptProbe(), calls, ackWaitMax)
	return probed(r, err, r.Want)
}

// probed completes r with a probe's answer: its *AckError, or got
// acknowledgements; another error is the probe's failure.
func probed(r driver.Replication, err error, got int) (driver.Replication, error) {
	var ae *driver.AckError
	switch {
	case errors.As(err, &ae):
		r.Got, r.Err = ae.Got, ae
	case err != nil:
		return r, err
	default:
		r.Got = got
	}
	return r, nil
}
