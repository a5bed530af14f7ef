package otlp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/otlptest"
	"github.com/tickd/tickd/lease/driver"
)

// TestOneTracePerTickAcrossReplicas: two replicas' tracers, knowing
// nothing of each other, put their fan-outs of one tick in one trace, each
// run a child of its replica's fan-out; past run_spans a run starts a
// trace of its own linked to the fan-out; a trigger's run is a trace of
// its own linked to the tick it carries. Decoded from real OTLP/HTTP
// exports.
func TestOneTracePerTickAcrossReplicas(t *testing.T) {
	rcv := otlptest.Start(t)
	env := func(string) string { return "" }
	T := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	var fanOuts = map[string]string{} // replica -> its fan-out span id
	for _, replica := range []string{"a", "b"} {
		tr, err := New(context.Background(), &config.Telemetry{Endpoint: rcv.URL, RunSpans: 2}, env, replica, "test")
		if err != nil || tr == nil {
			t.Fatalf("New: %v, %v", tr, err)
		}
		f := tr.StartFanOut("sync", T)
		fanOuts[replica] = f.SpanContext().SpanID().String()
		for _, e := range []string{"1", "2", "3"} {
			_, span := tr.StartRun(context.Background(), f, telemetry.Run{Task: "sync", Entity: replica + e, Tick: T, Fence: 7, Reason: driver.ReasonTick})
			telemetry.EndRun(span, driver.OutcomeDone, "", 2)
		}
		f.End(3, 3, "")
		_, span := tr.StartRun(context.Background(), nil, telemetry.Run{Task: "sync", Entity: "t", Tick: T, Reason: driver.ReasonTrigger})
		telemetry.EndRun(span, driver.OutcomeFailed, "boom", 0)
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	spans, err := rcv.Spans()
	if err != nil {
		t.Fatal(err)
	}
	tick := telemetry.TickTrace("sync", T).String()
	var inTick, linked, children int
	for _, s := range spans {
		switch judgeSpan(t, s, tick, fanOuts) {
		case "fan-out":
			inTick++
		case "child":
			children++
		case "linked":
			linked++
		}
	}
	if inTick != 2 || children != 4 || linked != 2 {
		t.Fatalf("%d fan-outs, %d runs in the tick's trace, %d past the bound; want 2, 4, 2 (of %d spans)", inTick, children, linked, len(spans))
	}
}

// judgeSpan checks span s of the test's tick (trace tick) by its kind,
// which it returns: a fan-out, a trigger's run, a run that is a child of
// its replica's fan-out, or one past the bound, linked to it.
func judgeSpan(t *testing.T, s otlptest.Span, tick string, fanOuts map[string]string) string {
	t.Helper()
	replica := s.Resource["service.instance.id"]
	switch {
	case s.Name == "tick sync":
		if s.TraceID != tick || s.Parent != "" {
			t.Errorf("%s's fan-out: trace %s parent %q, want the tick's trace %s as a root", replica, s.TraceID, s.Parent, tick)
		}
		return "fan-out"
	case s.Attrs["tickd.reason"] == "trigger":
		if s.TraceID == tick || len(s.Links) != 1 || s.Links[0].TraceID != tick || !s.Error {
			t.Errorf("a trigger's run: trace %s links %v error %v, want a trace of its own linked to the tick's, failed", s.TraceID, s.Links, s.Error)
		}
		return "trigger"
	case s.Parent == fanOuts[replica]:
		if s.Attrs["tickd.lease_renewals"] != "2" || s.Attrs["tickd.outcome"] != "done" {
			t.Errorf("run %s: renewals %q outcome %q, want 2, done", s.Attrs["tickd.entity"], s.Attrs["tickd.lease_renewals"], s.Attrs["tickd.outcome"])
		}
		if s.TraceID != tick {
			t.Errorf("run %s: trace %s, want the tick's %s", s.Attrs["tickd.entity"], s.TraceID, tick)
		}
		return "child"
	}
	if s.TraceID == tick || len(s.Links) != 1 || s.Links[0].SpanID != fanOuts[replica] {
		t.Errorf("run %s past the bound: trace %s links %v, want a trace of its own linked to fan-out %s", s.Attrs["tickd.entity"], s.TraceID, s.Links, fanOuts[replica])
	}
	return "linked"
}

// TestOffUnlessAsked: no endpoint anywhere, OTEL_SDK_DISABLED, or
// OTEL_TRACES_EXPORTER=none is no tracer; a gRPC protocol is refused with
// what to do.
func TestOffUnlessAsked(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"nothing":  {},
		"disabled": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"},
		"none":     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"},
	} {
		tr, err := New(context.Background(), nil, func(k string) string { return vars[k] }, "r", "v")
		if tr != nil || err != nil {
			t.Errorf("%s: %v, %v; want no tracer", name, tr, err)
		}
	}
	var off *telemetry.Tracer
	if ctx, span := off.StartRun(context.Background(), off.StartFanOut("x", time.Now()), telemetry.Run{}); span != nil || ctx != context.Background() {
		t.Error("an off tracer made a span")
	}
	grpc := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
	if _, err := New(context.Background(), nil, func(k string) string { return grpc[k] }, "r", "v"); err == nil {
		t.Error("grpc accepted; tickd exports over HTTP only")
	}
}

// TestASampledOutTickMakesNoRunSpans: a tick the sampler drops makes no
// span for its runs, whose ctx still carries the tick's trace, unsampled,
// for their commands to follow; nothing reaches the receiver.
func TestASampledOutTickMakesNoRunSpans(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	rcv := otlptest.Start(t)
	tr, err := New(context.Background(), &config.Telemetry{Endpoint: rcv.URL}, func(string) string { return "" }, "r", "v")
	if err != nil {
		t.Fatal(err)
	}
	T := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	f := tr.StartFanOut("sync", T)
	ctx, span := tr.StartRun(context.Background(), f, telemetry.Run{Task: "sync", Entity: "1", Tick: T, Reason: driver.ReasonTick})
	if span != nil {
		t.Fatal("a run of a sampled-out tick got a span")
	}
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID() != telemetry.TickTrace("sync", T) || sc.IsSampled() {
		t.Fatalf("the run's ctx carries %v, want the tick's trace, unsampled", sc)
	}
	telemetry.EndRun(span, driver.OutcomeDone, "", 0)
	f.End(1, 1, "")
	if err := tr.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if spans, _ := rcv.Spans(); len(spans) != 0 {
		t.Fatalf("%d spans exported for a sampled-out tick", len(spans))
	}
}

// TestABurstOfATicksSpansIsKept: 20,000 runs of one tick ending as fast as
// a loop makes them (a tick's burst) are all delivered; the SDK's default
// queue of 2,048 dropped three in four. Stop says how many were not.
func TestABurstOfATicksSpansIsKept(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := New(context.Background(), &config.Telemetry{Endpoint: rcv.URL}, func(string) string { return "" }, "a", "test")
	if err != nil {
		t.Fatal(err)
	}
	T := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	f := tr.StartFanOut("sync", T)
	const n = 20_000
	for i := range n {
		_, span := tr.StartRun(context.Background(), f, telemetry.Run{Task: "sync", Entity: "e", Tick: T, Fence: int64(i), Reason: driver.ReasonTick})
		telemetry.EndRun(span, driver.OutcomeDone, "", 0)
	}
	f.End(n, n, "")
	if err := tr.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans, err := rcv.Spans()
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != n+1 {
		t.Fatalf("%d spans received, want %d", len(spans), n+1)
	}
}

// TestStopSaysWhatWasNotDelivered: spans a collector refused are counted,
// and Stop's error says how many.
func TestStopSaysWhatWasNotDelivered(t *testing.T) {
	tr, err := New(context.Background(), &config.Telemetry{Endpoint: "http://127.0.0.1:1"}, func(string) string { return "" }, "a", "test")
	if err != nil {
		t.Fatal(err)
	}
	f := tr.StartFanOut("sync", time.Now())
	f.End(0, 0, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Stop(ctx); err == nil || !strings.Contains(err.Error(), "1 of the 1 spans sampled were not delivered") {
		t.Fatalf("Stop: %v, want it to say the span was not delivered", err)
	}
}

// TestExportErrorsGoToTheLog: the SDK's error for an export the collector
// did not take is a line of tickd's log (slog, rate-limited), not a
// plain-text line of the SDK's own on stderr; the tracer says where it
// exports.
func TestExportErrorsGoToTheLog(t *testing.T) {
	var b syncBuffer
	LogErrors(slog.New(slog.NewJSONHandler(&b, nil)))
	tr, err := New(context.Background(), &config.Telemetry{Endpoint: "http://127.0.0.1:1"}, func(string) string { return "" }, "a", "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Stop(context.Background()) }) //nolint:errcheck // undelivered: the point
	expect.Equal(t, "where it exports", tr.Where(), "http://127.0.0.1:1")
	f := tr.StartFanOut("sync", time.Now())
	f.End(0, 0, "")
	expect.WaitFor(t, 10*time.Second, "the failed export logged", func() bool { return strings.Contains(b.String(), `"msg":"traces: the OpenTelemetry SDK failed`) })
	expect.True(t, "a JSON line at warn: "+b.String(), strings.Contains(b.String(), `"level":"WARN"`))
}

// syncBuffer is a bytes.Buffer for one writer and one reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSDKTextIsBoundedAndSecretsNotShown: a malformed
// OTEL_EXPORTER_OTLP_HEADERS is said without its value (a token), and a
// hostile collector's answer (escapes, a bidi override, 4 MiB) is logged
// printable and cut, in tickd's log, not on stderr.
func TestSDKTextIsBoundedAndSecretsNotShown(t *testing.T) {
	errLimit = logs.NewLimiter(logs.Every) // another test's line does not hush these
	var b syncBuffer
	LogErrors(slog.New(slog.NewJSONHandler(&b, nil)))
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cr3t-token,broken-s3cr3t-header")
	hostile := "\x1b[2J\a\u202e" + strings.Repeat("x", 64<<10)
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck
		http.Error(w, hostile, http.StatusBadRequest)
	}))
	defer col.Close()
	tr, err := New(context.Background(), &config.Telemetry{Endpoint: col.URL}, func(string) string { return "" }, "a", "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Stop(context.Background()) }) //nolint:errcheck // refused: the point
	f := tr.StartFanOut("sync", time.Now())
	f.End(0, 0, "")
	expect.WaitFor(t, 10*time.Second, "the refused export logged", func() bool { return strings.Contains(b.String(), `"msg":"traces: the OpenTelemetry SDK failed`) })
	out := b.String()
	expect.True(t, "the malformed header is said: "+out, strings.Contains(out, "refused part of its configuration"))
	expect.True(t, "no secret in the log", !strings.Contains(out, "s3cr3t"))
	expect.True(t, "no escape sent raw: "+out[strings.Index(out, "SDK failed"):][:min(len(out)-strings.Index(out, "SDK failed"), 700)], !strings.Contains(out, `\u001b`) && !strings.Contains(out, "\u202e") && strings.Contains(out, `\\x1b`))
	for line := range strings.Lines(out) {
		expect.True(t, fmt.Sprintf("a line of at most 2 KiB: %d bytes", len(line)), len(line) <= 2<<10)
	}
}
