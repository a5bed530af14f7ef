package tasks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// each reads e once: its entities, and its error.
func each(e *Endpoint) ([]Entity, error) {
	var es []Entity
	err := e.EachEntity(context.Background(), func(en Entity) error { es = append(es, en); return nil })
	return es, err
}

// ids are es's ids, joined.
func ids(es []Entity) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.ID
	}
	return strings.Join(s, ",")
}

// TestEndpointReadsLinesAndArrays: JSON lines and one JSON array give the
// same entities, attributes included; an item it cannot use is skipped and
// the rest load.
func TestEndpointReadsLinesAndArrays(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"lines": "{\"id\": \"a\", \"tz\": \"Europe/Berlin\"}\n{\"tz\": \"UTC\"}\n\n{\"id\": \"b\"}\n",
		"array": ` [{"id": "a", "tz": "Europe/Berlin"}, {"tz": "UTC"}, "b"] `,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer s3cret" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				fmt.Fprint(w, body)
			}))
			defer srv.Close()
			es, err := each(&Endpoint{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}})
			if err != nil {
				t.Fatal(err)
			}
			if ids(es) != "a,b" || es[0].Attributes["tz"] != "Europe/Berlin" || es[1].Attributes != nil {
				t.Fatalf("got %+v, want a (Europe/Berlin) and b", es)
			}
		})
	}
}

// TestEndpointReusesTheListOn304: a 304 to If-None-Match yields the list
// read before, without reading a body (the parse count stays), and the
// list handed out is a copy (a run that changed its attributes changes no
// other run's).
func TestEndpointReusesTheListOn304(t *testing.T) {
	t.Parallel()
	var conditional atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v1"` {
			conditional.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		fmt.Fprint(w, `{"id": "a", "tz": "Asia/Tokyo"}`+"\n"+`{"id": "b", "tz": "Asia/Tokyo"}`)
	}))
	defer srv.Close()
	e := &Endpoint{URL: srv.URL}
	first, err := each(e)
	if err != nil {
		t.Fatal(err)
	}
	first[0].Attributes["tz"] = "changed by a run"
	for range 3 {
		again, err := each(e)
		if err != nil {
			t.Fatal(err)
		}
		if ids(again) != "a,b" || again[0].Attributes["tz"] != "Asia/Tokyo" || again[1].Attributes["tz"] != "Asia/Tokyo" {
			t.Fatalf("after a 304: %+v, want the list read first, as it was read", again)
		}
	}
	if conditional.Load() != 3 || e.parsed != 1 {
		t.Fatalf("%d conditional requests answered 304, %d bodies read; want 3, and 1 (the first)", conditional.Load(), e.parsed)
	}
}

// TestEndpointFailingUsesTheLastGoodList: a 500, and an endpoint that does
// not answer within the timeout, yield the last good list and say so (the
// error names its time); past MaxAge no list is used; before any list was
// read, none is.
func TestEndpointFailingUsesTheLastGoodList(t *testing.T) {
	t.Parallel()
	var mode atomic.Value
	mode.Store("ok")
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "500":
			http.Error(w, "down", http.StatusInternalServerError)
		case "hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			fmt.Fprint(w, `["a", "b"]`)
		}
	}))
	defer srv.Close()
	defer close(release)
	now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	e := &Endpoint{URL: srv.URL, Timeout: 200 * time.Millisecond, now: func() time.Time { return now }}

	mode.Store("500")
	if es, err := each(e); len(es) != 0 || !errors.Is(err, ErrSourceStale) || !strings.Contains(err.Error(), "no list was read") {
		t.Fatalf("failing before any list: %v, %v; want none, and the error", ids(es), err)
	}
	mode.Store("ok")
	if _, err := each(e); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"500", "hang"} {
		mode.Store(m)
		now = now.Add(30 * time.Minute)
		es, err := each(e)
		if ids(es) != "a,b" || !errors.Is(err, ErrSourceStale) || !strings.Contains(err.Error(), "using the list of 2026-11-29T07:00:00Z") {
			t.Fatalf("%s, 30 minutes after the last good list: %v, %v; want a,b and the error naming the list's time", m, ids(es), err)
		}
	}
	if _, err := each(e); !strings.Contains(err.Error(), "within entities_timeout") {
		t.Fatalf("a hanging endpoint: %v, want the timeout named", err)
	}
	now = now.Add(31 * time.Minute) // 61 minutes
	mode.Store("500")
	if es, err := each(e); len(es) != 0 || !errors.Is(err, ErrSourceStale) || !strings.Contains(err.Error(), "older than entities_max_age") {
		t.Fatalf("past entities_max_age: %v, %v; want no entities and the error", ids(es), err)
	}
}

// TestEndpointRefusesAHostileAnswer: a body without end (1 GB offered), a
// slow drip, a redirect to another origin and a list without end are each
// refused within their bound, and the last good list stands.
func TestEndpointRefusesAHostileAnswer(t *testing.T) {
	t.Parallel()
	var mode atomic.Value
	var sent atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Error("the other origin was sent the endpoint's token")
		}
		fmt.Fprint(w, `["stolen"]`)
	}))
	defer other.Close()
	srv := httptest.NewServer(hostile(&mode, &sent, other.URL))
	defer srv.Close()
	e := &Endpoint{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}, Timeout: time.Second, MaxBytes: 1 << 20}
	mode.Store("good")
	if _, err := each(e); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ mode, want string }{
		{"huge", "more than 1048576 bytes"},
		{"drip", "within entities_timeout (1s)"},
		{"redirect", "another origin"},
		{"many", "more than 3 entities"},
	} {
		mode.Store(c.mode)
		e.Timeout = 30 * time.Second // a loaded machine reads 1 MiB slowly: only the drip is cut by it
		switch c.mode {
		case "drip":
			e.Timeout = time.Second
		case "many":
			e.MaxEntities = 3
		}
		start := time.Now()
		es, err := each(e)
		if ids(es) != "good" || !errors.Is(err, ErrSourceStale) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, %v; want the last good list, and an error saying %q", c.mode, ids(es), err, c.want)
		}
		if d := time.Since(start); d > e.Timeout+5*time.Second {
			t.Errorf("%s: refused after %v", c.mode, d)
		}
	}
	// What the server wrote is the cap and what the connection buffers, not 1 GB.
	if n := sent.Load(); n > 64<<20 {
		t.Errorf("the huge body: %d bytes were written before the endpoint was refused; want about 1 MiB", n)
	}
	mode.Store("same-origin")
	if es, err := each(e); err != nil || ids(es) != "moved" {
		t.Fatalf("a redirect within the origin: %v, %v; want it followed", ids(es), err)
	}
}

// TestEndpointRefusesAClosedPort: a refused connection is the endpoint's
// failure, said without the URL's query (a token in it).
func TestEndpointRefusesAClosedPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = each(&Endpoint{URL: "http://" + addr + "/list?token=s3cret"})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "token=…") {
		t.Fatalf("got %v, want the failure, its URL's token hidden", err)
	}
}

// hostile answers as mode says: a body without end (counting what it
// sent), a slow drip, a redirect to other, or a good list.
func hostile(mode *atomic.Value, sent *atomic.Int64, other string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "huge": // 1 GB of lines, written as long as they are read
			line := []byte(`{"id": "x"}` + "\n")
			chunk := []byte(strings.Repeat(string(line), 64*1024/len(line)))
			for n := 0; n < 1<<30; n += len(chunk) {
				k, err := w.Write(chunk)
				sent.Add(int64(k))
				if err != nil {
					return
				}
			}
		case "drip": // a byte every 50ms
			w.Write([]byte("[")) //nolint:errcheck
			for {
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
				w.Write([]byte(`"d",`)) //nolint:errcheck
			}
		case "redirect":
			http.Redirect(w, r, other+"/list", http.StatusFound)
		case "same-origin":
			if r.URL.Path != "/moved" {
				http.Redirect(w, r, "/moved", http.StatusMovedPermanently)
				return
			}
			fmt.Fprint(w, `["moved"]`)
		case "many":
			fmt.Fprint(w, `["1", "2", "3", "4"]`)
		default:
			fmt.Fprint(w, `["good"]`)
		}
	})
}
