package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/otlptest"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// TestOneTracePerTickAcrossReplicas: two tickd processes on one Redis send
// their traces to a receiver that decodes real OTLP/HTTP exports. Every
// tick is one trace on both replicas (its id derived from the task and the
// tick); every run's span is in its tick's trace, a child of its own
// replica's fan-out span; and the exec child's TRACEPARENT names its
// run's span.
func TestOneTracePerTickAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rcv := otlptest.Start(t)
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, replicaConfig(srv.URL(), worker, "entities = "+entityList(20)+"\n\n[telemetry]\nendpoint = \""+rcv.URL+"\"\n"))
	logPath := filepath.Join(dir, "runs.log")
	env := []string{"TESTWORKER_LOG=" + logPath, "TESTWORKER_MAX_SLEEP=200ms"}
	a := tickdtest.Start(t, "A", env, "run", "-config", cfg)
	b := tickdtest.Start(t, "B", env, "run", "-config", cfg)
	var runs []tickdtest.Run
	expect.Within(30*time.Second, func() bool {
		runs = tickdtest.ReadRuns(t, logPath)
		return len(runs) >= 60
	})
	a.Signal(syscall.SIGTERM)
	b.Signal(syscall.SIGTERM)
	if ca, cb := a.Wait(20*time.Second), b.Wait(20*time.Second); ca != 0 || cb != 0 {
		t.Fatalf("exit codes %d %d", ca, cb)
	}
	runs = tickdtest.ReadRuns(t, logPath)
	spans, err := rcv.Spans()
	if err != nil {
		t.Fatalf("an export the receiver could not decode: %v", err)
	}
	fanOuts, runSpans := spansByKind(t, spans)
	checked := 0
	for _, r := range runs {
		if r.End.Event == "" || r.Start.Reason != "tick" {
			continue
		}
		judgeRunSpan(t, r, runSpans, fanOuts)
		checked++
	}
	if checked < 40 || t.Failed() {
		t.Fatalf("%d tick runs judged, of %d runs and %d spans", checked, len(runs), len(spans))
	}
	// Both replicas' fan-outs of one tick are in one trace.
	byTrace := map[string]map[string]bool{}
	for _, f := range fanOuts {
		if byTrace[f.TraceID] == nil {
			byTrace[f.TraceID] = map[string]bool{}
		}
		byTrace[f.TraceID][f.Resource["service.instance.id"]] = true
	}
	shared := 0
	for _, rs := range byTrace {
		if len(rs) == 2 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatalf("no tick's trace holds both replicas' fan-outs: %v", strings.Join(keys(byTrace), " "))
	}
}

// spansByKind sorts the received spans: the fan-outs by span id, the runs
// by "entity fence"; both replicas must have sent fan-outs.
func spansByKind(t *testing.T, spans []otlptest.Span) (fanOuts, runSpans map[string]otlptest.Span) {
	t.Helper()
	fanOuts, runSpans = map[string]otlptest.Span{}, map[string]otlptest.Span{}
	replicas := map[string]bool{}
	for _, s := range spans {
		switch s.Name {
		case "tick work":
			fanOuts[s.SpanID] = s
			replicas[s.Resource["service.instance.id"]] = true
		case "run work":
			runSpans[s.Attrs["tickd.entity"]+" "+s.Attrs["tickd.fence"]] = s
		}
	}
	if len(replicas) != 2 {
		t.Fatalf("fan-out spans from replicas %v, want both", replicas)
	}
	return fanOuts, runSpans
}

// judgeRunSpan: run r's span is in its tick's trace, a child of its
// replica's fan-out, and named by the TRACEPARENT its command got.
func judgeRunSpan(t *testing.T, r tickdtest.Run, runSpans, fanOuts map[string]otlptest.Span) {
	t.Helper()
	s, ok := runSpans[fmt.Sprintf("%s %d", r.Start.Entity, r.Start.Fence)]
	if !ok {
		t.Errorf("run %s fence %d (tick %s) has no span", r.Start.Entity, r.Start.Fence, r.Start.Tick)
		return
	}
	tick, err := time.Parse(time.RFC3339, r.Start.Tick)
	if err != nil {
		t.Fatal(err)
	}
	if want := telemetry.TickTrace("work", tick).String(); s.TraceID != want {
		t.Errorf("run %s of tick %s: trace %s, want the tick's %s", r.Start.Entity, r.Start.Tick, s.TraceID, want)
	}
	f, ok := fanOuts[s.Parent]
	if !ok || f.TraceID != s.TraceID || f.Resource["service.instance.id"] != s.Resource["service.instance.id"] {
		t.Errorf("run %s: parent %s is not its replica's fan-out of the tick (%+v)", r.Start.Entity, s.Parent, f)
	}
	if want := "00-" + s.TraceID + "-" + s.SpanID + "-01"; r.Start.Traceparent != want {
		t.Errorf("run %s: the command's TRACEPARENT %q, want %q", r.Start.Entity, r.Start.Traceparent, want)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
