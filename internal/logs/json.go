package logs

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// NewJSON is the daemon's JSON handler: slog.NewJSONHandler's lines, the
// same to the byte, with the common ones written without its generic path.
// A tick of 100,000 entities writes 100,000 "run ended" lines: 687 ns
// each through slog's handler, 304 ns here (BenchmarkRunLine;
// docs/performance.md, "Why the code looks like this", item 13). A line
// is written here when its own attributes are strings, integers or
// booleans whose keys and strings need no escaping, and no group is open;
// any other goes through slog's handler, whose output this one's is tested
// against (TestJSONAsSlogWritesIt).
func NewJSON(w io.Writer, level slog.Leveler) slog.Handler {
	lw := &lockedWriter{w: w}
	return &jsonHandler{slow: slog.NewJSONHandler(lw, &slog.HandlerOptions{Level: level}), lw: lw, fast: true}
}

// jsonHandler is NewJSON's. slow is slog's handler with the same
// attributes; pre is how slow writes them (",\"k\":v…"), taken from it.
type jsonHandler struct {
	slow  slog.Handler
	lw    *lockedWriter
	attrs []slog.Attr // every WithAttrs's, in order
	pre   []byte
	fast  bool // no group opened
}

// lockedWriter serialises the writes of both paths: each line is one Write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

func (h *jsonHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.slow.Enabled(ctx, l) }

func (h *jsonHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.slow, c.fast = h.slow.WithGroup(name), false
	return &c
}

func (h *jsonHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.slow = h.slow.WithAttrs(as)
	if c.fast {
		c.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], as...)
		c.pre = preformatted(c.attrs)
	}
	return &c
}

// preformatted is how slog's JSON handler writes attributes added with
// WithAttrs: what it writes, for a line without time or message, between
// the message and the closing brace.
func preformatted(as []slog.Attr) []byte {
	var b bytes.Buffer
	h := slog.NewJSONHandler(&b, nil).WithAttrs(as)
	h.Handle(context.Background(), slog.NewRecord(time.Time{}, slog.LevelInfo, "", 0)) //nolint:errcheck // a bytes.Buffer
	out := bytes.TrimPrefix(b.Bytes(), []byte(`{"level":"INFO","msg":""`))
	return bytes.Clone(bytes.TrimSuffix(out, []byte("}\n")))
}

// bufs are the lines being written, reused.
var bufs = sync.Pool{New: func() any { return new([]byte) }}

func (h *jsonHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.fast {
		return h.slow.Handle(ctx, r)
	}
	p := bufs.Get().(*[]byte)
	defer bufs.Put(p)
	b, ok := h.appendLine((*p)[:0], r)
	*p = b[:0]
	if !ok {
		return h.slow.Handle(ctx, r)
	}
	_, err := h.lw.Write(b)
	return err
}

// appendLine appends r's line to b, as slog's JSON handler writes it; not
// ok for a line it leaves to slog.
func (h *jsonHandler) appendLine(b []byte, r slog.Record) (_ []byte, ok bool) {
	if !plain(r.Message) {
		return b, false
	}
	b = append(b, '{')
	if !r.Time.IsZero() {
		t := r.Time.Round(0)
		if y := t.Year(); y < 0 || y >= 10000 {
			return b, false
		}
		b = append(t.AppendFormat(append(b, `"time":"`...), time.RFC3339Nano), `",`...)
	}
	b = append(append(append(b, `"level":"`...), r.Level.String()...), `","msg":"`...)
	b = append(append(b, r.Message...), '"')
	b = append(b, h.pre...)
	ok = true
	r.Attrs(func(a slog.Attr) bool {
		b, ok = appendAttr(b, a)
		return ok
	})
	return append(b, "}\n"...), ok
}

// appendAttr appends ",\"key\":value"; not ok for a kind or a string it
// leaves to slog.
func appendAttr(b []byte, a slog.Attr) ([]byte, bool) {
	if a.Key == "" || !plain(a.Key) {
		return b, false
	}
	b = append(append(append(b, `,"`...), a.Key...), `":`...)
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		s := v.String()
		if !plain(s) {
			return b, false
		}
		return append(append(append(b, '"'), s...), '"'), true
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10), true
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10), true
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool()), true
	}
	return b, false
}

// plain says whether s is written as it is between JSON quotes: printable
// ASCII but the quote and the backslash (slog's safe set).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
