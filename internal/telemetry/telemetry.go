// Package telemetry is tickd's tracing with OpenTelemetry's API: one trace
// per (task, tick), the same on every replica, and a span per run inside
// it. It makes its spans with a TracerProvider it is given: a program's
// own (FromProvider), or the binary's SDK (package otlp, FromSDK); it
// builds no SDK and no exporter itself.
//
// The trace id of a tick is derived from the task's name and the tick
// (TickTrace), so each replica's fan-out span joins it with no
// coordination: every replica's fan-out is a root span of that trace (or,
// under a program's provider, the child of a remote parent that stands for
// the tick), and each run it starts is a child of its replica's fan-out.
// Past a bound (RunSpans) a tick's runs on one replica get traces of their
// own, linked to the fan-out, so that a tick of 100,000 entities is not one
// trace of 100,000 spans. Triggers, reschedules and retries are traces of
// their own, linked to the tick they carry. Off (a nil *Tracer), every
// method is a no-op that costs a nil check.
package telemetry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"net/url"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/lease/driver"
)

// DefaultRunSpans is how many runs of a tick one replica's fan-out span
// parents when [telemetry] run_spans is not given.
const DefaultRunSpans = 1000

// Tracer traces ticks and runs; nil is off.
type Tracer struct {
	tr       trace.Tracer
	runSpans int64
	replica  string
	// own: the provider is tickd's SDK, whose root spans take the tick's
	// trace id from TickIDs; else a program's, whose ids are its own.
	own   bool
	where string                          // where the spans go, as said
	stop  func(ctx context.Context) error // the SDK's shutdown; nil: not ours
}

// Where says where the spans go: the endpoint the config or the
// environment gives, without credentials or a query (they may hold a
// token), or "the program's TracerProvider".
func (t *Tracer) Where() string {
	if !t.own {
		return t.where
	}
	u, err := url.Parse(t.where)
	if err != nil || u.Host == "" {
		return "(an endpoint that does not parse as a URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// Endpoint is where the config and the environment (getenv) send traces,
// as they give it: [telemetry] endpoint, else the OTLP variables'; "" when
// they ask for no tracing (none given, OTEL_SDK_DISABLED=true, or
// OTEL_TRACES_EXPORTER=none).
func Endpoint(cfg *config.Telemetry, getenv func(string) string) string {
	if getenv("OTEL_SDK_DISABLED") == "true" || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return ""
	}
	endpoint := ""
	if cfg != nil {
		endpoint = cfg.Endpoint
	}
	return cmp.Or(endpoint, getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

// FromProvider is a tracer that makes its spans with tp, a program's own
// provider (tickd.Options.TracerProvider): tickd builds no SDK nor
// exporter, reads no OTEL_* variable, and leaves tp's shutdown to the
// program. A tick's trace id is still TickTrace, the same on every
// replica: each fan-out span is the child of a remote parent of that trace
// (tickSpan, marked sampled: the program's sampler, parent-based, keeps
// the tick), which no span stands for. cfg gives run_spans, if any.
func FromProvider(tp trace.TracerProvider, cfg *config.Telemetry, replica string) *Tracer {
	return &Tracer{tr: tp.Tracer(tracerName), runSpans: runSpans(cfg), replica: replica, where: "the program's TracerProvider"}
}

// FromSDK is the tracer of tickd's own SDK provider tp (package otlp),
// whose ID generator is TickIDs; where says where its spans go, and stop
// shuts it down (Stop calls it).
func FromSDK(tp trace.TracerProvider, cfg *config.Telemetry, replica, where string, stop func(context.Context) error) *Tracer {
	return &Tracer{tr: tp.Tracer(tracerName), runSpans: runSpans(cfg), replica: replica, own: true, where: where, stop: stop}
}

// tracerName names tickd's tracer (its instrumentation scope).
const tracerName = "github.com/tickd/tickd"

// runSpans is cfg's run_spans, or DefaultRunSpans.
func runSpans(cfg *config.Telemetry) int64 {
	if cfg != nil && cfg.RunSpans > 0 {
		return int64(cfg.RunSpans)
	}
	return DefaultRunSpans
}

// Stop sends what is left, within ctx, of tickd's own SDK; a program's
// provider (FromProvider) is the program's to stop.
func (t *Tracer) Stop(ctx context.Context) error {
	if t == nil || t.stop == nil {
		return nil
	}
	return t.stop(ctx)
}

// TickTrace is the trace id of task's tick at tick: the same on every
// replica, from the task's name and the tick alone.
func TickTrace(task string, tick time.Time) trace.TraceID {
	h := sha256.New()
	h.Write([]byte("tickd tick\x00" + task + "\x00"))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(tick.UnixNano()))
	h.Write(b[:])
	var id trace.TraceID
	copy(id[:], h.Sum(nil))
	return id
}

// tickKey carries, in a context, the trace id the next root span takes.
type tickKey struct{}

// TickIDs is the ID generator of tickd's own SDK provider (package otlp):
// it gives a root span the trace id its context carries (a tick's), else
// random ids, as the SDK's own generator does.
type TickIDs struct{}

// NewIDs is a root span's trace and span ids.
func (TickIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(tickKey{}).(trace.TraceID)
	if !ok {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, TickIDs{}.NewSpanID(ctx, tid)
}

// NewSpanID is a span's id, at random.
func (TickIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for sid == (trace.SpanID{}) {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// FanOut is this replica's fan-out of task's tick: a root span of the
// tick's trace (TickTrace). End it with End.
type FanOut struct {
	span    trace.Span
	ctx     context.Context // its span's, its runs' spans' parent
	sampled bool            // its span is sampled: its runs' spans are too
	name    string          // its runs' spans' name
	runs    atomic.Int64    // run spans it parented
	link    trace.Link      // to the fan-out, for the runs past the bound
}

// StartFanOut starts the fan-out span of task's tick on this replica.
func (t *Tracer) StartFanOut(task string, tick time.Time) *FanOut {
	if t == nil {
		return nil
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("tickd.task", task), attribute.String("tickd.tick", tick.UTC().Format(time.RFC3339Nano)),
		attribute.String("tickd.replica", t.replica))}
	var ctx context.Context
	if t.own {
		// tickd's SDK: TickIDs gives a new root the tick's trace id.
		ctx, opts = context.WithValue(context.Background(), tickKey{}, TickTrace(task, tick)), append(opts, trace.WithNewRoot())
	} else {
		// A program's provider, whose ids are its own: the tick's trace id
		// comes from a remote parent that stands for the tick.
		ctx = trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: TickTrace(task, tick), SpanID: tickSpan(task, tick), TraceFlags: trace.FlagsSampled, Remote: true}))
	}
	_, span := t.tr.Start(ctx, "tick "+task, opts...)
	sc := span.SpanContext()
	return &FanOut{span: span, ctx: trace.ContextWithSpan(context.Background(), span), sampled: sc.IsSampled(), name: "run " + task, link: trace.Link{SpanContext: sc}}
}

// SpanContext is f's span's.
func (f *FanOut) SpanContext() trace.SpanContext { return f.span.SpanContext() }

// End ends f with what the fan-out counted.
func (f *FanOut) End(entities, started int, sourceErr string) {
	if f == nil {
		return
	}
	f.span.SetAttributes(attribute.Int("tickd.entities", entities), attribute.Int("tickd.started", started))
	if sourceErr != "" {
		f.span.SetStatus(codes.Error, sourceErr)
	}
	f.span.End()
}

// Run is what a run's span records.
type Run struct {
	Task, Entity string
	Tick         time.Time
	Fence        int64
	Reason       driver.Reason
	Attempt      int
	LimitWait    time.Duration // how long it waited for a limit
}

// RunSpan is a run's span; EndRun ends it.
type RunSpan struct {
	span  trace.Span
	r     Run
	child bool // a child of its fan-out, which says the task and the tick
}

// StartRun starts a run's span, in ctx (the run's context, which the
// handler gets, carrying the span): a child of f (its tick's fan-out on
// this replica) while f has parented fewer than the bound, else the root
// of a trace of its own, linked to f; with no f (a trigger, a retry, a
// reschedule, a run that waited for a limit), a trace of its own linked to
// the tick it carries. It returns ctx unchanged and a nil span when off,
// and a nil span when f was sampled out (ctx then carries f's decision).
func (t *Tracer) StartRun(ctx context.Context, f *FanOut, r Run) (context.Context, *RunSpan) {
	if t == nil {
		return ctx, nil
	}
	if f != nil && !f.sampled {
		// Every standard sampler drops a run whose fan-out it dropped (the
		// same trace id, or its parent's decision): no span is made, and the
		// run's ctx carries the unsampled decision on, for its command or
		// endpoint to follow.
		return trace.ContextWithSpanContext(ctx, f.span.SpanContext()), nil
	}
	parent, child, name := context.Background(), false, "run "+r.Task
	if f != nil {
		name = f.name
	}
	var opts []trace.SpanStartOption
	switch {
	case f != nil && f.runs.Add(1) <= t.runSpans:
		parent, child = f.ctx, true
	case f != nil:
		opts = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(f.link)}
	case !r.Tick.IsZero():
		tick := trace.NewSpanContext(trace.SpanContextConfig{TraceID: TickTrace(r.Task, r.Tick), SpanID: tickSpan(r.Task, r.Tick)})
		opts = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: tick})}
	default:
		opts = []trace.SpanStartOption{trace.WithNewRoot()}
	}
	_, span := t.tr.Start(parent, name, opts...)
	return trace.ContextWithSpan(ctx, span), &RunSpan{span: span, r: r, child: child}
}

// EndRun ends a run's span with its outcome (an error status for a failed
// one) and how many renewal rounds kept its lease. Its attributes are all
// set here, in one call: a span is exported when it ends, and the SDK
// grows a span's attributes at each call. A child of its fan-out leaves
// out what the fan-out says (the task, the tick); an attempt or a wait of
// 0 is left out: each attribute is paid for by every run.
func EndRun(rs *RunSpan, outcome driver.Outcome, errText string, renewals int) {
	if rs == nil {
		return
	}
	span, r := rs.span, rs.r
	if !span.IsRecording() { // what a sampled-out span would not keep is not even built
		span.End()
		return
	}
	var buf [10]attribute.KeyValue
	as := append(buf[:0], attribute.String("tickd.entity", r.Entity), attribute.Int64("tickd.fence", r.Fence),
		attribute.String("tickd.reason", string(r.Reason)), attribute.String("tickd.outcome", string(outcome)),
		attribute.Int("tickd.lease_renewals", renewals))
	if !rs.child {
		as = append(as, attribute.String("tickd.task", r.Task))
		if !r.Tick.IsZero() {
			as = append(as, attribute.String("tickd.tick", r.Tick.UTC().Format(time.RFC3339Nano)))
		}
	}
	if r.Attempt > 0 {
		as = append(as, attribute.Int("tickd.attempt", r.Attempt))
	}
	if r.LimitWait > 0 {
		as = append(as, attribute.Int64("tickd.limit_wait_ms", r.LimitWait.Milliseconds()))
	}
	span.SetAttributes(as...)
	if errText != "" {
		span.SetStatus(codes.Error, errText)
	}
	span.End()
}

// tickSpan is the span id a link to a tick's trace names (no span has it:
// a link needs one; it names the trace).
func tickSpan(task string, tick time.Time) trace.SpanID {
	var sid trace.SpanID
	tid := TickTrace(task, tick)
	copy(sid[:], tid[8:])
	return sid
}
