// Package telemetry is tickd's tracing with OpenTelemetry: one trace per
// (task, tick), the same on every replica, and a span per run inside it.
//
// The trace id of a tick is derived from the task's name and the tick
// (TickTrace), so each replica's fan-out span joins it with no
// coordination: every replica's fan-out is a root span of that trace, and
// each run it starts is a child of its replica's fan-out. Past a bound
// (RunSpans) a tick's runs on one replica get traces of their own, linked
// to the fan-out, so that a tick of 100,000 entities is not one trace of
// 100,000 spans. Triggers, reschedules and retries are traces of their
// own, linked to the tick they carry.
//
// It is off unless configured: by [telemetry] endpoint, or the standard
// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. The
// other OTEL_* variables apply as the SDK reads them (OTEL_TRACES_SAMPLER
// and _ARG, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_EXPORTER_OTLP_HEADERS…). Off, every method is a no-op that costs a
// nil check.
package telemetry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/lease/driver"
)

// DefaultRunSpans is how many runs of a tick one replica's fan-out span
// parents when [telemetry] run_spans is not given.
const DefaultRunSpans = 1000

// Tracer traces ticks and runs; nil is off.
type Tracer struct {
	tp       *sdktrace.TracerProvider
	tr       trace.Tracer
	runSpans int64
	replica  string
	// ended counts the sampled spans ended, delivered those the collector
	// took: Stop says how many were not (dropped as the queue overflowed,
	// or refused).
	ended, delivered *atomic.Int64
	where            string // the endpoint, as the config or the environment gives it
}

// Where says where the spans go: the endpoint the config or the
// environment gives (the SDK adds /v1/traces to a base endpoint), without
// credentials or a query (they may hold a token).
func (t *Tracer) Where() string {
	if t.tp == nil {
		return t.where
	}
	u, err := url.Parse(t.where)
	if err != nil || u.Host == "" {
		return "(an endpoint that does not parse as a URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// errLog is where LogErrors sends the SDK's errors; errLimit bounds them.
var (
	errLog   atomic.Pointer[slog.Logger]
	errLimit = logs.NewLimiter(logs.Every)
	errOnce  sync.Once
)

// LogErrors sends the OpenTelemetry SDK's errors (an export the collector
// did not take) to log, at warn, one line per logs.Every with a count of
// those suppressed: left to itself, the SDK writes plain-text lines to
// stderr, into a JSON log, every few seconds while a collector is down.
// The SDK has one error handler per process: the last call's log wins.
//
// The SDK's own log (otel.SetLogger: a header it could not parse, a URL)
// goes there too, at warn, its errors only, and without the values it
// names, which may be a header's token: only a file or a header's name is
// shown. Every text from outside (a collector's answer) is made printable
// and cut to maxErrText bytes (logs.Printable).
func LogErrors(log *slog.Logger) {
	errLog.Store(log)
	errOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			if l := errLog.Load(); l != nil {
				errLimit.Log(l, slog.LevelWarn, "otel", "traces: the OpenTelemetry SDK failed (spans are dropped while the collector does not take them)",
					"error", logs.Printable(err.Error(), maxErrText))
			}
		}))
		otel.SetLogger(logr.New(sdkLog{}))
	})
}

// maxErrText bounds an SDK error's text in the log.
const maxErrText = 512

// sdkLog is the SDK's logr sink: its errors to errLog, at warn, rate
// limited, with only the values shown is safe to show; the rest of what
// it logs (debug) is dropped.
type sdkLog struct{}

func (sdkLog) Init(logr.RuntimeInfo)            {}
func (sdkLog) Enabled(int) bool                 { return false } // Info: never
func (sdkLog) Info(int, string, ...any)         {}
func (s sdkLog) WithValues(...any) logr.LogSink { return s }
func (s sdkLog) WithName(string) logr.LogSink   { return s }
func (sdkLog) Error(err error, msg string, kv ...any) {
	l := errLog.Load()
	if l == nil {
		return
	}
	args := []any{"what", logs.Printable(msg, maxErrText)}
	if err != nil {
		args = append(args, "error", logs.Printable(err.Error(), maxErrText))
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok && (k == "file" || k == "key") {
			args = append(args, k, logs.Printable(fmt.Sprint(kv[i+1]), maxErrText))
		}
	}
	errLimit.Log(l, slog.LevelWarn, "otel-config", "traces: the OpenTelemetry SDK refused part of its configuration (values not shown: they may be secrets)", args...)
}

// The batcher's bounds where no OTEL_BSP_* variable gives them: a tick's
// runs end in a burst of thousands a second, which the SDK's defaults
// (2,048 spans queued, exported 512 at a time every 5s) drop most of.
// The queue holds a tick of 20,000 runs' spans (about 20 MB while a
// collector does not answer).
const (
	maxQueued      = 20_480
	maxExportBatch = 2_048
	exportEvery    = time.Second
)

// New returns the tracer the config and the environment (getenv) ask
// for, or nil when they ask for none. It exports over OTLP/HTTP. getenv
// says whether to trace and over what; the SDK reads the other OTEL_*
// variables (sampler, resource, headers) from the process's environment.
func New(ctx context.Context, cfg *config.Telemetry, getenv func(string) string, replica, version string) (*Tracer, error) {
	endpoint, runSpans := "", int64(DefaultRunSpans)
	if cfg != nil {
		endpoint = cfg.Endpoint
		if cfg.RunSpans > 0 {
			runSpans = int64(cfg.RunSpans)
		}
	}
	where := Endpoint(cfg, getenv)
	if where == "" {
		return nil, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(k); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%s=%s: tickd exports traces over OTLP/HTTP only: set it to http/protobuf and point the endpoint at the collector's HTTP port (4318)", k, p)
		}
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "tickd"), attribute.String("service.instance.id", replica),
			attribute.String("service.version", version)),
		resource.WithFromEnv()) // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	t := &Tracer{runSpans: runSpans, replica: replica, ended: new(atomic.Int64), delivered: new(atomic.Int64), where: where}
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(endCounter{t.ended}),
		sdktrace.WithBatcher(deliveryCounter{exp, t.delivered}, batcherOptions(getenv)...),
		sdktrace.WithResource(res), sdktrace.WithIDGenerator(ids{}))
	t.tr = t.tp.Tracer("github.com/tickd/tickd")
	return t, nil
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

// batcherOptions are tickd's bounds of the batcher (maxQueued…) but where
// an OTEL_BSP_* variable gives its own.
func batcherOptions(getenv func(string) string) []sdktrace.BatchSpanProcessorOption {
	var opts []sdktrace.BatchSpanProcessorOption
	if getenv("OTEL_BSP_MAX_QUEUE_SIZE") == "" {
		opts = append(opts, sdktrace.WithMaxQueueSize(maxQueued))
	}
	if getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") == "" {
		opts = append(opts, sdktrace.WithMaxExportBatchSize(maxExportBatch))
	}
	if getenv("OTEL_BSP_SCHEDULE_DELAY") == "" {
		opts = append(opts, sdktrace.WithBatchTimeout(exportEvery))
	}
	return opts
}

// endCounter counts the sampled spans that end.
type endCounter struct{ n *atomic.Int64 }

func (c endCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c endCounter) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		c.n.Add(1)
	}
}
func (endCounter) Shutdown(context.Context) error   { return nil }
func (endCounter) ForceFlush(context.Context) error { return nil }

// deliveryCounter counts the spans its exporter delivered.
type deliveryCounter struct {
	sdktrace.SpanExporter
	n *atomic.Int64
}

func (c deliveryCounter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		c.n.Add(int64(len(spans)))
	}
	return err
}

// FromProvider is a tracer that makes its spans with tp, a program's own
// provider (tickd.Options.TracerProvider): tickd builds no SDK nor
// exporter, reads no OTEL_* variable, and leaves tp's shutdown to the
// program. A tick's trace id is still TickTrace, the same on every
// replica: each fan-out span is the child of a remote parent of that trace
// (tickSpan, marked sampled: the program's sampler, parent-based, keeps
// the tick), which no span stands for. cfg gives run_spans, if any.
func FromProvider(tp trace.TracerProvider, cfg *config.Telemetry, replica string) *Tracer {
	runSpans := int64(DefaultRunSpans)
	if cfg != nil && cfg.RunSpans > 0 {
		runSpans = int64(cfg.RunSpans)
	}
	return &Tracer{tr: tp.Tracer("github.com/tickd/tickd"), runSpans: runSpans, replica: replica, where: "the program's TracerProvider",
		ended: new(atomic.Int64), delivered: new(atomic.Int64)}
}

// Stop sends what is left, within ctx; a program's provider (FromProvider)
// is the program's to stop.
func (t *Tracer) Stop(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	err := t.tp.Shutdown(ctx)
	if lost := t.ended.Load() - t.delivered.Load(); lost > 0 {
		err = errors.Join(err, fmt.Errorf("%d of the %d spans sampled were not delivered: the queue overflowed (OTEL_BSP_MAX_QUEUE_SIZE), or the collector refused them or did not answer", lost, t.ended.Load()))
	}
	return err
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

// ids gives a root span the trace id its context carries (a tick's), else
// random ids, as the SDK's own generator does.
type ids struct{}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(tickKey{}).(trace.TraceID)
	if !ok {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, ids{}.NewSpanID(ctx, tid)
}

func (ids) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
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
	ctx := context.WithValue(context.Background(), tickKey{}, TickTrace(task, tick))
	root := trace.WithNewRoot() // tickd's SDK: ids gives the root the tick's trace id
	if t.tp == nil {
		// A program's provider, whose ids are its own: the tick's trace id
		// comes from a remote parent that stands for the tick.
		ctx = trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: TickTrace(task, tick), SpanID: tickSpan(task, tick), TraceFlags: trace.FlagsSampled, Remote: true}))
		root = trace.WithLinks() // none: the parent is the point
	}
	_, span := t.tr.Start(ctx, "tick "+task, root, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("tickd.task", task), attribute.String("tickd.tick", tick.UTC().Format(time.RFC3339Nano)),
			attribute.String("tickd.replica", t.replica)))
	sc := span.SpanContext()
	return &FanOut{span: span, ctx: trace.ContextWithSpan(context.Background(), span), sampled: sc.IsSampled(), name: "run " + task, link: trace.Link{SpanContext: sc}}
}

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
