package lease

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/redistest"
)

// BenchmarkAcquireRelease measures acquire+release of distinct entities
// against a local redis-server, one lease at a time and in batches of 256.
// Each op is one entity lease acquired and released; compare ops/s with
// `redis-benchmark -P 16 -t set` on the same machine (README, "Speed").
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	s := newRedisStore(b, newClient(b, srv.Addr), Options{})
	s.InitEpoch(bg) //nolint:errcheck
	b.Run("one", func(b *testing.B) {
		i := 0
		for b.Loop() {
			l, err := s.Acquire(bg, req("one"+strconv.Itoa(i), time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Release(bg, Outcome{Result: "done"}, nil); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
	})
	b.Run("batched", func(b *testing.B) {
		reqs := make([]Request, batchSize)
		ls := make([]*Lease, batchSize)
		n := 0
		b.ResetTimer()
		for n < b.N {
			k := min(batchSize, b.N-n)
			for j := range k {
				reqs[j] = req("batch"+strconv.Itoa(n+j), time.Minute)
			}
			for j, r := range s.AcquireBatch(bg, reqs[:k]) {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				ls[j] = r.Lease
			}
			errs, err := s.ReleaseBatch(bg, ls[:k], Outcome{Result: "done"})
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range errs {
				if e != nil {
					b.Fatal(e)
				}
			}
			n += k
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
	})
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
		reqs := make([]Request, 0, batchSize)
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
			if _, err := s.ReleaseBatch(bg, ls, Outcome{Result: "done"}); err != nil {
				b.Error(err)
			}
			reqs = reqs[:0]
		}
		for pb.Next() {
			reqs = append(reqs, req("p"+strconv.FormatInt(w, 10)+"-"+strconv.Itoa(n), time.Minute))
			n++
			if len(reqs) == batchSize {
				flush()
			}
		}
		if len(reqs) > 0 {
			flush()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leases/s")
}
