package tasks

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

func entities(t *testing.T, s Source) []Entity {
	t.Helper()
	var es []Entity
	if err := EachEntity(context.Background(), s, func(e Entity) error { es = append(es, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return es
}

// TestJSONLinesCarryAttributes: each line of a jsonl source is an entity
// with its attributes; a number is kept as its text; a line that breaks the
// bounds is skipped and reported with its line number, and the rest of the
// list still loads.
func TestJSONLinesCarryAttributes(t *testing.T) {
	manyLine, _ := json.Marshal(map[string]any{"id": "many", "a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8",
		"i": "9", "j": "10", "k": "11", "l": "12", "m": "13", "n": "14", "o": "15", "p": "16", "q": "17"})
	lines := []string{
		`{"id": "shop-42", "tz": "Europe/Berlin", "group": "acme", "weight": 2}`, // 1
		``,                            // 2: blank
		`{"tz": "UTC"}`,               // 3: no id
		`{"id": "x", "Bad": "1"}`,     // 4: a name out of [a-z][a-z0-9_]*
		`{"id": "x", "tz": {"a": 1}}`, // 5: not a string
		`not json`,                    // 6
		`{"id": "x", "v": "` + strings.Repeat("v", MaxAttrValue+1) + `"}`, // 7: too long
		string(manyLine),               // 8: too many
		`{"id": "x", "v": "a\u0000b"}`, // 9: NUL
		`{"id": 7}`,                    // 10: a number id
		`{"id": "plain"}`,              // 11
		`["id"]`,                       // 12: not an object
	}
	p := filepath.Join(t.TempDir(), "entities.jsonl")
	os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644) //nolint:errcheck
	log, out := logger()
	got := entities(t, File{Path: p, Format: FormatJSONL, Log: log})
	want := []Entity{
		{ID: "shop-42", Attributes: Attributes{"tz": "Europe/Berlin", "group": "acme", "weight": "2"}},
		{ID: "7"},
		{ID: "plain"},
	}
	expect.Same(t, "entities", got, want)
	for _, line := range []string{`"line":3,`, `"line":4,`, `"line":5,`} {
		expect.True(t, "reported "+line, strings.Contains(out.String(), line))
	}
	expect.True(t, "a count of every bad line", strings.Contains(out.String(), `"bad_lines":8`))
	ids, err := collect(t, File{Path: p, Format: FormatJSONL})
	expect.Equal(t, "ids without attributes", strings.Join(ids, ","), "shop-42,7,plain")
	expect.Equal(t, "error", err, nil)
}

// TestJSONLinesFromACommand: a command's output in jsonl carries its
// attributes too, and a plain source's entities have none.
func TestJSONLinesFromACommand(t *testing.T) {
	got := entities(t, Command{Argv: []string{"printf", `{"id":"a","tz":"Asia/Tokyo"}\n{"id":"b"}\n`}, Format: FormatJSONL})
	expect.Same(t, "entities", got, []Entity{{ID: "a", Attributes: Attributes{"tz": "Asia/Tokyo"}}, {ID: "b"}})
	got = entities(t, Command{Argv: []string{"printf", `{"id":"a"}\n`}})
	expect.Same(t, "a line of the plain format is an id", got, []Entity{{ID: `{"id":"a"}`}})
	expect.Same(t, "a static list", entities(t, Static{"x"}), []Entity{{ID: "x"}})
}

// TestRunsSeeAttributes: an exec command gets each attribute as
// TICKD_ATTR_NAME, never in its argv; an HTTP action gets them in its
// body's "attributes", never in its URL; a run without any sends none.
func TestRunsSeeAttributes(t *testing.T) {
	hostile := `$(touch /tmp/x); {entity} "quoted" ` + "\n"
	run := Run{Task: "t", Entity: "e", Tick: time.Unix(0, 0), Attributes: Attributes{"tz": "Europe/Berlin", "note": hostile}}
	env := env(run)
	expect.Equal(t, "the attributes, last, by name", strings.Join(env[len(env)-2:], "|"), "TICKD_ATTR_NOTE="+hostile+"|TICKD_ATTR_TZ=Europe/Berlin")
	expect.Equal(t, "argv", strings.Join(expand([]string{"cmd", "{entity}"}, run.Entity), " "), "cmd e")

	var bodies []map[string]any
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var m map[string]any
		json.Unmarshal(data, &m) //nolint:errcheck
		bodies, paths = append(bodies, m), append(paths, r.URL.String())
	}))
	defer srv.Close()
	h := HTTP{URL: srv.URL + "/hook"}
	if _, err := h.Do(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	run.Attributes = nil
	if _, err := h.Do(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	expect.Same(t, "the attributes in the body", bodies[0]["attributes"], any(map[string]any{"tz": "Europe/Berlin", "note": hostile}))
	_, has := bodies[1]["attributes"]
	expect.True(t, "no attributes member for a run without any", !has)
	expect.Equal(t, "the URLs", strings.Join(paths, " "), "/hook /hook")
}
