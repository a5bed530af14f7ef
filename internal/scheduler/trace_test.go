package scheduler

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/tasks"
)

// TestAGoHandlersCtxCarriesItsRunsSpan: with tracing on, a Go handler's
// ctx carries its run's span, in the trace of the tick it runs for, and
// that span is what the receiver gets as the run's.
func TestAGoHandlersCtxCarriesItsRunsSpan(t *testing.T) {
	e := newEnv(t, false)
	tr, exported := tracer(t)
	var mu sync.Mutex
	var seen []trace.SpanContext
	var ticks []time.Time
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		seen, ticks = append(seen, trace.SpanContextFromContext(ctx)), append(ticks, r.Tick)
		return tasks.Done, nil
	}
	s := e.run("[[tasks]]\nname = \"go\"\nevery = \"1h\"\ncatch_up = \"1h\"\nhandler = \"rec\"\n",
		Options{Store: e.store("r1"), Tracer: tr, DuePoll: 20 * time.Millisecond})
	expect.WaitFor(t, 10*time.Second, "the catch-up tick's run", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	stopWithin(s, 5*time.Second)
	spans := exported()
	sc := seen[0]
	if !sc.IsValid() || !sc.IsSampled() || sc.TraceID() != telemetry.TickTrace("go", ticks[0]) {
		t.Fatalf("the handler's ctx carries %+v, want a sampled span of the tick's trace %s", sc, telemetry.TickTrace("go", ticks[0]))
	}
	for _, sp := range spans {
		if sp.Name == "run go" && sp.SpanID == sc.SpanID().String() {
			return
		}
	}
	t.Fatalf("no run span %s among the %d exported", sc.SpanID(), len(spans))
}

// TestARunsSpanSaysItsLimitWait: of two runs of a tick under a limit of
// one, the one that waited for the other says how long
// (tickd.limit_wait_ms); the one that did not wait says nothing of it.
func TestARunsSpanSaysItsLimitWait(t *testing.T) {
	e := newEnv(t, false)
	tr, exported := tracer(t)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		time.Sleep(300 * time.Millisecond) // the run's work, which the other waits for
		return tasks.Done, nil
	}
	s := e.run("[[limits]]\nname = \"one\"\nconcurrency = 1\n[[tasks]]\nname = \"lim\"\nevery = \"1h\"\ncatch_up = \"1h\"\nhandler = \"rec\"\nlimits = [\"one\"]\nentities = [\"a\", \"b\"]\n",
		Options{Store: e.store("r1"), Tracer: tr, DuePoll: 20 * time.Millisecond})
	expect.WaitFor(t, 10*time.Second, "both runs ended", func() bool { return e.ev.count(kind(EventRunEnded)) == 2 })
	stopWithin(s, 5*time.Second)
	spans := exported()
	var waits []string
	for _, sp := range spans {
		if sp.Name == "run lim" {
			waits = append(waits, sp.Attrs["tickd.limit_wait_ms"])
		}
	}
	slices.Sort(waits)
	if len(waits) != 2 || waits[0] != "" || waits[1] == "" {
		t.Fatalf("the runs' limit waits %q, want one without and one with", waits)
	}
	// At least the other's work; not the catch-up tick's age.
	if ms, _ := strconv.Atoi(waits[1]); ms < 290 || ms > 10_000 {
		t.Fatalf("the run that waited says %sms, want the other's 300ms work, a little more", waits[1])
	}
}

// span is what a test reads of an ended span.
type span struct {
	Name, SpanID string
	Attrs        map[string]string // values as text
}

// tracer is tickd's tracer over an SDK provider with tickd's IDs, as the
// binary's own is (its OTLP exporter is tested with it, in cmd/tickd);
// exported stops it and returns the spans that ended.
func tracer(t *testing.T) (*telemetry.Tracer, func() []span) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(telemetry.TickIDs{}))
	tr := telemetry.FromSDK(tp, nil, "r1", "memory", tp.ForceFlush) // a shutdown would empty exp
	return tr, func() []span {
		t.Helper()
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		var out []span
		for _, s := range exp.GetSpans() {
			sp := span{Name: s.Name, SpanID: s.SpanContext.SpanID().String(), Attrs: map[string]string{}}
			for _, kv := range s.Attributes {
				sp.Attrs[string(kv.Key)] = kv.Value.String()
			}
			out = append(out, sp)
		}
		return out
	}
}
