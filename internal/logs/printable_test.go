package logs

import (
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"
)

func TestPrintable(t *testing.T) {
	expect.Equal(t, "plain text", Printable("collector answered 500", 100), "collector answered 500")
	expect.Equal(t, "controls and a bidi override", Printable("a\x1b[31mb\x07c\u202ed\xff", 100), `a\x1b[31mb\ac\u202ed\xff`)
	got := Printable(strings.Repeat("é", 1000), 11)
	expect.Equal(t, "cut on a rune, with the rest counted", got, "ééééé… (1990 bytes more)")
}
