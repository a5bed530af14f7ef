package tasks

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// traceContext is the W3C Trace Context (traceparent, tracestate): how a
// run's command or HTTP endpoint joins the run's trace, when tickd traces
// (docs/operations.md, "Traces").
var traceContext propagation.TraceContext

// traceEnv is TRACEPARENT (and TRACESTATE) for a run's command, when its
// ctx carries a span: the variables OpenTelemetry SDKs read to continue a
// trace.
func traceEnv(ctx context.Context) []string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	var env []string
	for k, v := range c {
		env = append(env, strings.ToUpper(k)+"="+v)
	}
	return env
}

// traceHeaders sets traceparent (and tracestate) on an HTTP action's
// request, when its ctx carries a span.
func traceHeaders(ctx context.Context, h http.Header) {
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}
