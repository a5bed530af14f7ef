package logs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// both writes r through NewJSON and through slog's JSON handler, each
// made by with from a new handler, and answers the two outputs.
func both(with func(slog.Handler) slog.Handler, r slog.Record) (ours, slogs string) {
	var a, b bytes.Buffer
	with(NewJSON(&a, slog.LevelDebug)).Handle(context.Background(), r)                                          //nolint:errcheck // a bytes.Buffer
	with(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})).Handle(context.Background(), r) //nolint:errcheck // a bytes.Buffer
	return a.String(), b.String()
}

// runLine is a "run ended" line as the scheduler writes it: the run's
// attributes in the record, the replica, task and tick added before.
func runLine(at time.Time, entity string) (func(slog.Handler) slog.Handler, slog.Record) {
	with := func(h slog.Handler) slog.Handler {
		return h.WithAttrs([]slog.Attr{slog.String(KeyReplica, "web-1")}).
			WithAttrs([]slog.Attr{slog.String(KeyTask, "sync"), Tick(at.Truncate(time.Minute))})
	}
	r := slog.NewRecord(at, slog.LevelInfo, MsgRunEnded, 0)
	r.AddAttrs(slog.String(KeyEntity, entity), slog.Int64(KeyFence, 1764251000123456), slog.String(KeyReason, "tick"),
		slog.String(KeyOutcome, "done"), slog.String(KeyDuration, "0s"))
	return with, r
}

type valuer struct{}

func (valuer) LogValue() slog.Value { return slog.StringValue("from a LogValuer") }

// TestJSONAsSlogWritesIt: the daemon's JSON handler writes every line as
// slog's does, those it writes itself and those it leaves to slog.
func TestJSONAsSlogWritesIt(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 15, 4, 5, 123456789, time.UTC)
	none := func(h slog.Handler) slog.Handler { return h }
	record := func(t time.Time, lvl slog.Level, msg string, as ...slog.Attr) slog.Record {
		r := slog.NewRecord(t, lvl, msg, 0)
		r.AddAttrs(as...)
		return r
	}
	runWith, run := runLine(at, "user-42")
	hostileWith, hostile := runLine(at, "a\"b\\c\n<script>é\u2028\xff")
	cases := []struct {
		name string
		with func(slog.Handler) slog.Handler
		r    slog.Record
	}{
		{"run ended", runWith, run},
		{"run ended, an id to escape", hostileWith, hostile},
		{"no attributes", none, record(at, slog.LevelWarn, "tick")},
		{"no time", none, record(time.Time{}, slog.LevelInfo, "x", slog.Int("n", 1))},
		{"a monotonic time", none, record(time.Now(), slog.LevelInfo, "x")},
		{"a time in another zone", none, record(at.In(time.FixedZone("x", 5*3600+1800)), slog.LevelInfo, "x")},
		{"a year past 9999", none, record(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "x")},
		{"levels between", none, record(at, slog.LevelInfo+2, "x", slog.Bool("b", true), slog.Uint64("u", 7))},
		{"a message to escape", none, record(at, slog.LevelError, "tab\there \"quoted\"")},
		{"a key to escape", none, record(at, slog.LevelInfo, "x", slog.String("k\"ey", "v"))},
		{"an empty key", none, record(at, slog.LevelInfo, "x", slog.String("", "v"), slog.Attr{})},
		{"other kinds", none, record(at, slog.LevelInfo, "x", slog.Duration("d", time.Second), slog.Float64("f", 0.1),
			slog.Time("t", at), slog.Any("err", errors.New("boom")), slog.Any("v", valuer{}), slog.Group("g", slog.Int("i", 1)))},
		{"attributes added, one a LogValuer", func(h slog.Handler) slog.Handler {
			return h.WithAttrs([]slog.Attr{slog.Any("v", valuer{}), slog.String("s", "x\"y")}).WithAttrs(nil)
		}, record(at, slog.LevelInfo, "x", slog.Int("n", -3))},
		{"a group opened", func(h slog.Handler) slog.Handler {
			return h.WithAttrs([]slog.Attr{slog.Int("a", 1)}).WithGroup("g").WithAttrs([]slog.Attr{slog.Int("b", 2)})
		}, record(at, slog.LevelInfo, "x", slog.Int("c", 3))},
		{"an empty group opened", func(h slog.Handler) slog.Handler { return h.WithGroup("g") }, record(at, slog.LevelInfo, "x")},
	}
	for _, c := range cases {
		ours, slogs := both(c.with, c.r)
		expect.Equal(t, c.name, ours, slogs)
	}
}

// TestJSONWritesTheRunLinesItself: the line written per run takes the
// fast path; were it to fall back to slog, the daemon would be as slow as
// before, and no line would say so.
func TestJSONWritesTheRunLinesItself(t *testing.T) {
	t.Parallel()
	with, r := runLine(time.Now(), "user-42")
	h := with(NewJSON(&bytes.Buffer{}, slog.LevelInfo)).(*jsonHandler)
	_, ok := h.appendLine(nil, r)
	expect.True(t, "the run ended line written without slog's handler", ok)
}

// TestJSONLinesStayWhole: lines written at once through both paths, from
// several goroutines, are each one whole line.
func TestJSONLinesStayWhole(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(NewJSON(&out, slog.LevelInfo))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if g%2 == 0 {
					log.Info("fast", "i", i, "s", strings.Repeat("x", 100))
				} else {
					log.Info("slow", "d", time.Duration(i), "s", strings.Repeat("é", 50))
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	expect.Equal(t, "lines", len(lines), 1600)
	for _, l := range lines {
		if !strings.HasPrefix(l, `{"time":"`) || !strings.HasSuffix(l, `}`) {
			t.Fatalf("a line not whole: %q", l)
		}
	}
}

// FuzzJSONAsSlog: any message, key and strings.
func FuzzJSONAsSlog(f *testing.F) {
	f.Add("run ended", "entity", "user-42", int64(7), "task")
	f.Add("x\x00y", "k\u2028", "\xff\xfe", int64(-1), "é")
	f.Fuzz(func(t *testing.T, msg, key, s string, n int64, pre string) {
		with := func(h slog.Handler) slog.Handler { return h.WithAttrs([]slog.Attr{slog.String(pre, s)}) }
		r := slog.NewRecord(time.Unix(0, n).UTC(), slog.LevelInfo, msg, 0)
		r.AddAttrs(slog.String(key, s), slog.Int64(key, n), slog.Bool(s, n%2 == 0))
		ours, slogs := both(with, r)
		if ours != slogs {
			t.Fatalf("ours:\n%s\nslog's:\n%s", ours, slogs)
		}
	})
}

// BenchmarkRunLine writes the "run ended" line through slog's JSON
// handler and through the daemon's.
func BenchmarkRunLine(b *testing.B) {
	for _, c := range []struct {
		name string
		h    slog.Handler
	}{
		{"slog", slog.NewJSONHandler(io.Discard, nil)},
		{"daemon", NewJSON(io.Discard, slog.LevelInfo)},
	} {
		b.Run(c.name, func(b *testing.B) {
			with, r := runLine(time.Now(), "user-42")
			h := with(c.h)
			b.ReportAllocs()
			for b.Loop() {
				h.Handle(context.Background(), r) //nolint:errcheck // io.Discard
			}
		})
	}
}
