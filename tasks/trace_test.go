package tasks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestRunsCarryTheirTraceOn: with a run's span in its ctx, an HTTP action's
// request carries its traceparent, an exec run's command gets TRACEPARENT;
// with none, neither gets anything.
func TestRunsCarryTheirTraceOn(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled})
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	for name, ctx := range map[string]context.Context{"traced": trace.ContextWithSpanContext(context.Background(), sc), "untraced": context.Background()} {
		expect := want
		if name == "untraced" {
			expect = ""
		}
		var got string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Get("traceparent") }))
		if _, err := (HTTP{URL: srv.URL}).Do(ctx, Run{Entity: "e"}); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		if got != expect {
			t.Errorf("%s HTTP action: traceparent %q, want %q", name, got, expect)
		}
		out := filepath.Join(t.TempDir(), "env")
		if _, err := (Exec{Argv: []string{"sh", "-c", `printf %s "$TRACEPARENT" > ` + out}}).Do(ctx, Run{Entity: "e"}); err != nil {
			t.Fatal(err)
		}
		env, _ := os.ReadFile(out)
		if strings.TrimSpace(string(env)) != expect {
			t.Errorf("%s exec run: TRACEPARENT %q, want %q", name, env, expect)
		}
	}
}
