package logs

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/lmittmann/tint"

	"github.com/tickd/tickd/internal/testkit/expect"
)

func TestPrintable(t *testing.T) {
	expect.Equal(t, "plain text", Printable("collector answered 500", 100), "collector answered 500")
	expect.Equal(t, "controls and a bidi override", Printable("a\x1b[31mb\x07c\u202ed\xff", 100), `a\x1b[31mb\ac\u202ed\xff`)
	got := Printable(strings.Repeat("é", 1000), 11)
	expect.Equal(t, "cut on a rune, with the rest counted", got, "ééééé… (1990 bytes more)")
}

// TestTerminalSafe: on a terminal (tint), a run's output line (the
// message) and a value holding ESC, BEL or a bidi override come out with
// those escaped, never raw: tint writes a message as it is, and turns a
// quoted \x1b back into ESC.
func TestTerminalSafe(t *testing.T) {
	var b strings.Builder
	log := slog.New(tint.NewTextHandler(&b, &tint.Options{ReplaceAttr: TerminalSafe}))
	log.Info("out \x1b[2J\a", "line", "a\x1b]0;title\a\u202eb", "error", errors.New("e\x1b[31m"))
	out := strings.NewReplacer("\x1b[2m", "", "\x1b[0m", "", "\x1b[92m", "").Replace(b.String()) // tint's own colours
	expect.True(t, "no ESC, BEL or bidi override: "+strconv.Quote(out), !strings.ContainsAny(out, "\x1b\a\u202e"))
	expect.True(t, "escaped: "+out, strings.Contains(out, `\u001b[2J\u0007`) && strings.Contains(out, `\u202e`))
}
