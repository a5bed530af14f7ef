package lease

import (
	"fmt"
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
			l, err := s.Acquire(bg, req(fmt.Sprint("one", i), time.Minute))
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
				reqs[j] = req(fmt.Sprint("batch", n+j), time.Minute)
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
