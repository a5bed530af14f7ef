package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/lease/driver"
)

// BenchmarkRunSpanFull is a run's span, fully sampled, made, ended and
// exported over OTLP/HTTP to a receiver that drops it: cpu-ns/op is the
// process's CPU per run (the exporter's goroutines too), the figure the
// end-to-end benchmark's E2E_TRACE=full adds per run.
func BenchmarkRunSpanFull(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck // dropped
	}))
	defer srv.Close()
	b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tr, err := New(context.Background(), &config.Telemetry{Endpoint: srv.URL, RunSpans: 1 << 30}, func(string) string { return "" }, "bench", "bench")
	if err != nil {
		b.Fatal(err)
	}
	T := time.Now().Truncate(time.Minute)
	f := tr.StartFanOut("bench", T)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	ctx := context.Background()
	cpu0 := cpuNow()
	b.ResetTimer()
	for i := range b.N {
		_, span := tr.StartRun(ctx, f, telemetry.Run{Task: "bench", Entity: ids[i%len(ids)], Tick: T, Fence: int64(i), Reason: driver.ReasonTick})
		telemetry.EndRun(span, driver.OutcomeDone, "", 1)
	}
	f.End(b.N, b.N, "")
	if err := tr.Stop(context.Background()); err != nil { // every span exported: its CPU counts
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuNow()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuNow is the process's CPU time so far, user and system, in ns.
func cpuNow() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // it does not fail for RUSAGE_SELF
	return ru.Utime.Nano() + ru.Stime.Nano()
}
