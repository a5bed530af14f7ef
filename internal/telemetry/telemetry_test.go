package telemetry

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestAProgramsProviderKeepsTheTicksTrace: two replicas each making their
// spans with a program's own provider (its own ids) put one tick's
// fan-outs in the tick's trace, TickTrace, as tickd's own SDK does; the
// program's provider is not shut down by Stop.
func TestAProgramsProviderKeepsTheTicksTrace(t *testing.T) {
	tick := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var ids []trace.TraceID
	for _, replica := range []string{"a", "b"} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		tr := FromProvider(tp, nil, replica)
		tr.StartFanOut("sync", tick).End(1, 1, "")
		expect.Equal(t, "Stop leaves the program's provider", tr.Stop(context.Background()), nil)
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%s: %d spans", replica, len(spans))
		}
		ids = append(ids, spans[0].SpanContext.TraceID())
		tp.Shutdown(context.Background()) //nolint:errcheck // in memory
	}
	expect.True(t, "both fan-outs in the tick's trace", ids[0] == TickTrace("sync", tick) && ids[1] == ids[0])
}
