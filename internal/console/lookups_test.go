package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestEntityPageShowsAttributes: the entity page, and its JSON, show the
// entity's attributes as its source gives them, its zone and next tick
// there; an entity the source does not list says so; an entities_command
// is never run for a viewer; and a page that refreshes itself reads an
// endpoint once, not at each refresh.
func TestEntityPageShowsAttributes(t *testing.T) {
	e := newEnv(t, false)
	_, body := e.do("GET", "/tasks/sync/entity?id=a", "", nil, nil)
	expect.True(t, "a's page shows its attributes and its zone:\n"+body, strings.Contains(body, "<th>tz</th><td>Asia/Tokyo</td>") &&
		strings.Contains(body, "<p>Zone: Asia/Tokyo; next tick <time") && strings.Contains(body, "<th>note</th><td>&lt;script&gt;"))
	_, body = e.do("GET", "/tasks/sync/entity?id=b", "", nil, nil)
	expect.True(t, "b, without a zone of its own, is in the task's:\n"+body, strings.Contains(body, "None (entities from ") && strings.Contains(body, "<p>Zone: UTC; next tick"))
	_, body = e.do("GET", "/tasks/sync/entity?id=nobody", "", nil, nil)
	expect.True(t, "an entity the source does not list", strings.Contains(body, "Not listed by its source"))
	_, js := e.do("GET", "/api/tasks/sync/entity?id=a", "", nil, nil)
	var doc report.EntityDoc
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatal(err)
	}
	expect.True(t, "the JSON: "+js, doc.Listed && doc.Timezone == "Asia/Tokyo" && doc.Attributes["tz"] == "Asia/Tokyo" && !doc.NextTick.Time().IsZero())

	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		fmt.Fprint(w, `[{"id": "u1", "tz": "Mars/Base"}]`)
	}))
	defer srv.Close()
	ran := t.TempDir() + "/ran"
	cfg, err := config.Parse("t.toml", []byte(fmt.Sprintf(`
[[tasks]]
name = "url"
every = "1h"
handler = "h"
timezone_from = "tz"
entities_url = "%s?tenant=a"

[[tasks]]
name = "cmd"
every = "1h"
handler = "h"
entities_command = ["sh", "-c", "touch %s; echo c1"]
`, srv.URL, ran)))
	if err != nil {
		t.Fatal(err)
	}
	e.con.Reload(cfg)
	for range 10 {
		_, body = e.do("GET", "/tasks/url/entity?id=u1", "", nil, nil)
	}
	expect.True(t, "an unknown zone is flagged:\n"+body, strings.Contains(body, `<span class="flag">Unknown zone</span>: tz "Mars/Base" is no IANA zone`))
	expect.Equal(t, "GETs of the endpoint for 10 views", gets.Load(), int32(1))
	// The endpoint asked for another tenant's list, by its query alone, is
	// another source: its answer is not the one kept.
	cfg2, err := config.Parse("t.toml", []byte(fmt.Sprintf("[[tasks]]\nname = \"url\"\nevery = \"1h\"\nhandler = \"h\"\ntimezone_from = \"tz\"\nentities_url = %q\n", srv.URL+"?tenant=b")))
	if err != nil {
		t.Fatal(err)
	}
	e.con.Reload(cfg2)
	e.do("GET", "/api/tasks/url/entity?id=u1", "", nil, nil)
	expect.Equal(t, "GETs once the query changed", gets.Load(), int32(2))
	e.con.Reload(cfg)
	_, body = e.do("GET", "/tasks/cmd/entity?id=c1", "", nil, nil)
	expect.True(t, "a command's attributes are not read:\n"+body, strings.Contains(body, "Not read: the entities come from entities_command, which the console does not run"))
	expect.True(t, "and the command did not run", !fileExists(ran))
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
