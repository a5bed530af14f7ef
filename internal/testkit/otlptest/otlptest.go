// Package otlptest is an OTLP/HTTP trace receiver for tests: it decodes
// what an exporter sends to /v1/traces with the protocol's own Go types,
// and keeps every span, flattened, for a test to judge.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its ids in hex.
type Span struct {
	TraceID, SpanID, Parent string
	Name                    string
	Attrs                   map[string]string // string, int and bool values, as text
	Resource                map[string]string
	Links                   []Link
	Error                   bool // status code error
}

// Link is a span's link to another.
type Link struct{ TraceID, SpanID string }

// Receiver receives traces over OTLP/HTTP.
type Receiver struct {
	URL string // the base URL: give it as the endpoint

	mu    sync.Mutex
	spans []Span
	bad   error
}

// Start starts a receiver, closed when t ends.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail(w, err)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		r.fail(w, err)
		return
	}
	// An ExportTraceServiceRequest is, on the wire, a TracesData (both are
	// field 1, repeated ResourceSpans): read as one, without the collector
	// package, which brings gRPC's modules into tickd's go.mod.
	var msg tracepb.TracesData
	if err := proto.Unmarshal(data, &msg); err != nil {
		r.fail(w, err)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					Parent: hex.EncodeToString(s.ParentSpanId), Name: s.Name, Attrs: attrs(s.Attributes), Resource: res,
					Error: s.GetStatus().GetCode() == 2}
				for _, l := range s.Links {
					sp.Links = append(sp.Links, Link{hex.EncodeToString(l.TraceId), hex.EncodeToString(l.SpanId)})
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	// An ExportTraceServiceResponse without a partial success: no bytes.
}

func (r *Receiver) fail(w http.ResponseWriter, err error) {
	r.mu.Lock()
	r.bad = err
	r.mu.Unlock()
	http.Error(w, err.Error(), http.StatusBadRequest)
}

// Spans are the spans received so far, and the first export it could not
// decode, if any.
func (r *Receiver) Spans() ([]Span, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...), r.bad
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = map[bool]string{true: "true", false: "false"}[v.BoolValue]
		}
	}
	return m
}
