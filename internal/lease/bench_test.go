package lease

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
)

// BenchmarkAcquireRelease measures acquire+release of distinct entities
// against a local redis-server: one lease at a time, in batches of 256 of
// new entities, and in batches of 256 of entities that already ran (ticks).
// Each op is one entity lease acquired and released; compare ops/s with
// `redis-benchmark -P 16 -t set` on the same machine (docs/performance.md).
//
// LEASE_BENCH_REDIS=host:port runs it against that server instead, one
// started by hand: for instance under valgrind's callgrind, which counts
// the instructions Redis spends per lease (docs/performance.md).
func BenchmarkAcquireRelease(b *testing.B) {
	addr := os.Getenv("LEASE_BENCH_REDIS")
	if addr == "" {
		addr = redistest.Start(b).Addr
	}
	s := newRedisStore(b, newClient(b, addr), Options{})
	s.InitEpoch(bg) //nolint:errcheck
	b.Run("one", func(b *testing.B) {
		i := 0
		for b.Loop() {
			l, err := s.Acquire(bg, req("one"+strconv.Itoa(i), time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeDone}, nil); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
	})
	b.Run("batched", func(b *testing.B) {
		batches(b, s, func(i int) driver.Request { return req("batch"+strconv.Itoa(i), time.Minute) })
	})
	// A tick over the same 65,536 entities again and again, as the daemon's
	// fan-out does: every value already holds a last tick and a last run.
	b.Run("ticks", func(b *testing.B) { ticks(b, s, "tick", 0, 0) })
	// The same for a task that keeps the run record (catch_up_runs = "all").
	b.Run("recorded", func(b *testing.B) { ticks(b, s, "rec", 0, time.Hour) })
	// The same in chunks of 16, as one replica's fan-out sends a tick, and
	// of 32, as it sends a task's of 128 run slots or more.
	b.Run("chunks", func(b *testing.B) { ticks(b, s, "chunk", 16, 0) })
	b.Run("chunks32", func(b *testing.B) { ticks(b, s, "chunk32-", 32, 0) })
	// The same under a limit with room for every run: the limited path's
	// cost a run; and under a fair one, the runs in 100 groups.
	s.SetLimits([]driver.Limit{{Name: "room", Concurrency: 1 << 30, Burst: 1}, {Name: "fair", Concurrency: 1 << 30, Burst: 1, Fair: true}})
	b.Run("limited", func(b *testing.B) { limitedTicks(b, s, "room", nil) })
	b.Run("fair", func(b *testing.B) {
		limitedTicks(b, s, "fair", func(r *driver.Request, i int) { r.Grouped, r.Group, r.Weight = true, strconv.Itoa(i%100), 1 })
	})
}

// limitedTicks is batches of new entities' tick runs under limit lim, each
// request set by with (nil: left as it is).
func limitedTicks(b *testing.B, s *Store, lim string, with func(*driver.Request, int)) {
	T := time.Now()
	batches(b, s, func(i int) driver.Request {
		r := req(lim+strconv.Itoa(i), time.Minute)
		r.Reason, r.Tick, r.Limits = driver.ReasonTick, T, []string{lim}
		if with != nil {
			with(&r, i)
		}
		return r
	})
}

// ticks runs batches over a tick of 65,536 entities named prefix and a
// number, again and again, every entity having run once before; with a
// chunk length, each chunk in a row are one Request.Chunk.
func ticks(b *testing.B, s *Store, prefix string, chunk int, record time.Duration) {
	const pool = 1 << 16
	T := time.Now()
	tick := func(i int) driver.Request {
		r := req(prefix+strconv.Itoa(i%pool), time.Minute)
		r.Reason, r.Tick, r.Record = driver.ReasonTick, T.Add(time.Duration(i/pool)*time.Millisecond), record
		if chunk > 0 {
			r.Chunk = strconv.Itoa(i % pool / chunk) // named by its entities, as a fan-out names it
		}
		return r
	}
	for lo := 0; lo < pool; lo += 256 { // every entity has run once
		reqs := make([]driver.Request, 256)
		for j := range reqs {
			reqs[j] = tick(lo + j)
		}
		release(b, s, acquire(b, s, reqs))
	}
	T = T.Add(time.Millisecond)
	b.ResetTimer()
	batches(b, s, tick)
}

// batches acquires and releases b.N leases, 256 at a time, the i-th for
// mk(i), and reports leases/s and where the time went: CPU µs per lease of
// Redis's main thread and of this process (keeper and GC included).
func batches(b *testing.B, s *Store, mk func(i int) driver.Request) {
	redis0, self0 := redisCPU(b, s), selfCPU()
	reqs := make([]driver.Request, 256)
	for n := 0; n < b.N; {
		k := min(256, b.N-n)
		for j := range k {
			reqs[j] = mk(n + j)
		}
		release(b, s, acquire(b, s, reqs[:k]))
		n += k
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
	b.ReportMetric((redisCPU(b, s)-redis0)/float64(b.N), "redis-µs/lease")
	b.ReportMetric((selfCPU()-self0)/float64(b.N), "client-µs/lease")
}

// redisCPU is the CPU time, in µs, Redis's main thread has used.
func redisCPU(b *testing.B, s *Store) float64 {
	return redistest.MainThreadCPU(b, redisClient(s))
}

// selfCPU is the CPU time, in µs, this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // cannot fail for RUSAGE_SELF
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

func acquire(b *testing.B, s *Store, reqs []driver.Request) []*Lease {
	ls := make([]*Lease, len(reqs))
	for j, r := range s.AcquireBatch(bg, reqs) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		ls[j] = r.Lease
	}
	return ls
}

func release(b *testing.B, s *Store, ls []*Lease) {
	errs, err := s.ReleaseBatch(bg, ls, driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range errs {
		if e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkAcquireReleaseParallel is the batched path with several batches in
// flight, so that client and server work overlap as they do in the daemon
// (fan-out acquiring while finished runs release).
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	srv := redistest.Start(b)
	s := newRedisStore(b, newClient(b, srv.Addr), Options{})
	s.InitEpoch(bg) //nolint:errcheck
	var worker atomic.Int64
	b.SetParallelism(2)
	b.RunParallel(func(pb *testing.PB) {
		w := worker.Add(1)
		reqs := make([]driver.Request, 0, driver.BatchSize)
		n := 0
		flush := func() {
			ls := make([]*Lease, len(reqs))
			for j, r := range s.AcquireBatch(bg, reqs) {
				if r.Err != nil {
					b.Error(r.Err)
					return
				}
				ls[j] = r.Lease
			}
			if _, err := s.ReleaseBatch(bg, ls, driver.Finished{Outcome: driver.OutcomeDone}); err != nil {
				b.Error(err)
			}
			reqs = reqs[:0]
		}
		for pb.Next() {
			reqs = append(reqs, req("p"+strconv.FormatInt(w, 10)+"-"+strconv.Itoa(n), time.Minute))
			n++
			if len(reqs) == driver.BatchSize {
				flush()
			}
		}
		if len(reqs) > 0 {
			flush()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
}

// BenchmarkAcquireReleaseReplicated measures batched acquire+release on a
// primary with one replica, with acknowledgement (AcksAuto: one WAIT per
// batch) and without (AcksNever), in the same run: the bound is
// acks <= 1.5x the time of no acks.
func BenchmarkAcquireReleaseReplicated(b *testing.B) {
	pair := redistest.StartReplicated(b, redistest.ReplicatedOptions{})
	for _, acks := range []driver.ReplicaAcks{driver.AcksNever, driver.AcksAuto} {
		b.Run("acks="+acks.String(), func(b *testing.B) {
			s := newRedisStore(b, newClient(b, pair.Primary.Addr), Options{}, acks)
			s.InitEpoch(bg) //nolint:errcheck
			prefix := "r" + acks.String() + strconv.Itoa(b.N) + "-"
			batches(b, s, func(i int) driver.Request { return req(prefix+strconv.Itoa(i), time.Minute) })
		})
	}
}

// BenchmarkClusterSpread measures whether the Redis work spreads over the
// masters of a Redis Cluster: batches of 256 leases (acquire + release),
// round robin over six tasks whose buckets the three masters share, on a
// single Redis and on a 3-master Cluster (one replica each, every batch
// acknowledged per shard) in the same run. It reports Redis CPU (INFO cpu,
// main thread) per lease in all and the busiest master's share of it.
func BenchmarkClusterSpread(b *testing.B) {
	cl := redistest.StartCluster(b)
	var tasks []string
	per := map[string]int{}
	for i := 0; len(tasks) < 6; i++ {
		name := "bench-" + strconv.Itoa(i)
		m := cl.MasterOf(b, TaskKey("bench", name)).Addr
		if per[m] < 2 {
			per[m]++
			tasks = append(tasks, name)
		}
	}
	run := func(b *testing.B, c RedisClient, nodes []string) {
		s, err := NewRedis(c, "bench", Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Stop(bg) })
		s.InitEpoch(bg) //nolint:errcheck
		cpu0 := nodesCPU(b, nodes)
		reqs := make([]driver.Request, 256)
		for n := 0; n < b.N; {
			k := min(256, b.N-n)
			task := tasks[(n/256)%len(tasks)]
			for j := range k {
				reqs[j] = driver.Request{Task: task, Entity: strconv.Itoa(n + j), TTL: time.Minute, Reason: driver.ReasonTrigger}
			}
			release(b, s, acquire(b, s, reqs[:k]))
			n += k
		}
		cpu1 := nodesCPU(b, nodes)
		var total, most float64
		for i := range nodes {
			d := cpu1[i] - cpu0[i]
			total += d
			most = max(most, d)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
		b.ReportMetric(total/float64(b.N), "redis-µs/lease")
		b.ReportMetric(most/total, "busiest-share")
	}
	b.Run("single", func(b *testing.B) {
		srv := redistest.Start(b)
		run(b, newClient(b, srv.Addr), []string{srv.Addr})
	})
	b.Run("cluster", func(b *testing.B) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		b.Cleanup(func() { c.Close() })
		var masters []string
		for _, m := range cl.Masters(b) {
			masters = append(masters, m.Addr)
		}
		run(b, c, masters)
	})
}

// nodesCPU reads the main-thread CPU time (µs) of each node at addrs.
func nodesCPU(b *testing.B, addrs []string) []float64 {
	out := make([]float64, len(addrs))
	for i, a := range addrs {
		out[i] = redistest.MainThreadCPU(b, newClient(b, a))
	}
	return out
}

// BenchmarkPoll measures what one replica's polls cost Redis with 1 and
// with 100 tasks, each with a request pending for later: a due poll
// (TakeDue, nothing due yet), a pause poll (Paused) and an announcement,
// as the daemon makes them (the due loop every 100ms, the others every
// 500ms). Reported per due poll: Redis CPU µs and round trips.
func BenchmarkPoll(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run("tasks="+strconv.Itoa(n), func(b *testing.B) {
			srv := redistest.Start(b)
			c := newClient(b, srv.Addr)
			s := newRedisStore(b, c, Options{})
			s.InitEpoch(bg) //nolint:errcheck
			tasks := make([]string, n)
			for i := range tasks {
				tasks[i] = "task-" + strconv.Itoa(i)
				if err := s.Enqueue(bg, driver.Due{Task: tasks[i], Entity: "e", Reason: driver.ReasonRetry}, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			trips := countTrips(c)
			cpu0 := redisCPU(b, s)
			trips0 := trips.Load()
			for i := 0; b.Loop(); i++ {
				if ds, err := s.TakeDue(bg, 64, time.Minute); err != nil || len(ds) != 0 {
					b.Fatal(ds, err)
				}
				if i%5 == 0 {
					if _, err := s.Fleet().Pauses(bg); err != nil {
						b.Fatal(err)
					}
					if err := s.Fleet().Announce(bg, tasks, time.Minute); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric((redisCPU(b, s)-cpu0)/float64(b.N), "redis-µs/poll")
			b.ReportMetric(float64(trips.Load()-trips0)/float64(b.N), "round-trips/poll")
		})
	}
}

// countTrips counts the round trips c makes: one per command sent alone,
// one per pipeline.
func countTrips(c *redis.Client) *atomic.Int64 {
	n := &atomic.Int64{}
	c.AddHook(tripHook{n})
	return n
}

type tripHook struct{ n *atomic.Int64 }

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}
