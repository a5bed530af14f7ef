// Package otlp is the tickd binary's own OpenTelemetry SDK: the tracer
// the config's [telemetry] table and the standard OTEL_* variables ask
// for, exporting over OTLP/HTTP, and the SDK's own lines routed to the
// log. A program embedding tickd hands its own provider in instead
// (tickd.Options.TracerProvider) and links none of this.
//
// It is off unless configured: by [telemetry] endpoint, or the standard
// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. The
// other OTEL_* variables apply as the SDK reads them (OTEL_TRACES_SAMPLER
// and _ARG, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_EXPORTER_OTLP_HEADERS…).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/telemetry"
)

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

// Open is the binary's tracer: New with the process's environment, the
// SDK's own lines routed to log first (LogErrors) when tracing is asked
// for.
func Open(cfg *config.Telemetry, replica, version string, log *slog.Logger) (*telemetry.Tracer, error) {
	if telemetry.Endpoint(cfg, os.Getenv) != "" {
		LogErrors(log)
	}
	return New(context.Background(), cfg, os.Getenv, replica, version)
}

// New returns the tracer the config and the environment (getenv) ask
// for, or nil when they ask for none: tickd's own OpenTelemetry SDK,
// exporting over OTLP/HTTP, for the binary. getenv says whether to trace
// and over what; the SDK reads the other OTEL_* variables (sampler,
// resource, headers) from the process's environment. Its root spans take
// the tick's trace id (telemetry.TickIDs), so a sampler that decides by
// trace id keeps or drops a tick on every replica alike.
func New(ctx context.Context, cfg *config.Telemetry, getenv func(string) string, replica, version string) (*telemetry.Tracer, error) {
	endpoint := ""
	if cfg != nil {
		endpoint = cfg.Endpoint
	}
	where := telemetry.Endpoint(cfg, getenv)
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
	ended, delivered := new(atomic.Int64), new(atomic.Int64)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(endCounter{ended}),
		sdktrace.WithBatcher(deliveryCounter{exp, delivered}, batcherOptions(getenv)...),
		sdktrace.WithResource(res), sdktrace.WithIDGenerator(telemetry.TickIDs{}))
	stop := func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		if lost := ended.Load() - delivered.Load(); lost > 0 {
			err = errors.Join(err, fmt.Errorf("%d of the %d spans sampled were not delivered: the queue overflowed (OTEL_BSP_MAX_QUEUE_SIZE), or the collector refused them or did not answer", lost, ended.Load()))
		}
		return err
	}
	return telemetry.FromSDK(tp, cfg, replica, where, stop), nil
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
