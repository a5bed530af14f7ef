package console

import (
	"context"
	"encoding/hex"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// awkwardIDs are entity ids a link or a form could bend: URL syntax,
// escapes, spaces, a newline, unicode, dot segments, a bidi override.
var awkwardIDs = []string{"a/b", "x y", "x+y", "q?x=1", "h#f", "p%20c", "100%", "line\nbreak", "ünï 長", "..", "../../etc", "rtl\u202eevil"}

var (
	entityHref  = regexp.MustCompile(`href="(/tasks/sync/entity\?id=[^"]*)"`)
	hiddenField = regexp.MustCompile(`<input type="hidden" name="entity_hex" value="([0-9a-f]*)">`)
)

// TestLinksCarryTheExactID: every entity link on the task page reaches its
// entity's page, whose forms carry the exact id: the trigger button
// triggers that entity alone (a newline does not split it in two), and an
// unlock confirmed with the id as the page shows it unlocks it. Links used
// to be URL-encoded twice ("a/b" led to "a%2Fb", "x y" to "x+y").
func TestLinksCarryTheExactID(t *testing.T) {
	e := newEnv(t, true)
	// The task lists the ids, so that the console triggers them.
	var list []string
	for _, id := range awkwardIDs {
		list = append(list, strconv.Quote(id))
	}
	cfg, err := config.Parse("t.toml", []byte("[[tasks]]\nname = \"sync\"\nevery = \"15m\"\nhandler = \"h\"\nentities = ["+strings.Join(list, ", ")+"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.con.Reload(cfg)
	ctx := context.Background()
	for _, id := range awkwardIDs {
		l, err := e.store.Acquire(ctx, driver.Request{Task: "sync", Entity: id, TTL: time.Minute, Reason: driver.ReasonTrigger})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Release(ctx, driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, page := e.do("GET", "/tasks/sync", "ops", nil, nil)
	var linked []string
	for _, m := range entityHref.FindAllStringSubmatch(page, -1) {
		u, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		linked = append(linked, u.Query().Get("id"))
	}
	for _, id := range awkwardIDs {
		if !slices.Contains(linked, id) {
			t.Errorf("no link reaches %q (%d links)", id, len(linked))
		}
	}
	for _, id := range awkwardIDs {
		_, page := e.do("GET", "/tasks/sync/entity?id="+url.QueryEscape(id), "ops", nil, nil)
		m := hiddenField.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("%q: no trigger form on its page", id)
		}
		b, _ := hex.DecodeString(m[1])
		if got := string(b); got != id {
			t.Errorf("the trigger form of %q carries %q", id, got)
			continue
		}
		resp, _ := e.do("POST", "/tasks/sync/trigger", "ops", url.Values{"entity_hex": {m[1]}}, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("trigger %q: %d", id, resp.StatusCode)
			continue
		}
		as, err := e.store.Fleet().Actions(ctx, "sync", 1)
		if err != nil || len(as) != 1 || !slices.Equal(as[0].Entities, []string{id}) {
			t.Errorf("trigger of %q recorded %+v", id, as)
		}
	}
	// Unlock an id with a newline, typed as the page shows it.
	id := "line\nbreak"
	if _, err := e.store.Acquire(ctx, driver.Request{Task: "sync", Entity: id, TTL: time.Minute, Reason: driver.ReasonTrigger}); err != nil {
		t.Fatal(err)
	}
	resp, _ := e.do("POST", "/tasks/sync/unlock", "ops", url.Values{"entity": {id}, "confirm": {report.Visible(id)}}, nil)
	expect.Equal(t, "unlock confirmed with the visible id", resp.StatusCode, http.StatusSeeOther)
	expect.Equal(t, "how the page shows it", report.Visible(id), `line\nbreak`)
	expect.Equal(t, "a bidi override is shown, not obeyed", report.Visible("rtl\u202eevil"), `rtl\u202eevil`)
}
