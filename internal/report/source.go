package report

import (
	"fmt"
	"net/url"

	"github.com/tickd/tickd/config"
)

// DescribeSource says where a task's entities come from, in a few words.
func DescribeSource(t config.Task) string {
	switch {
	case t.Entities != nil:
		return fmt.Sprintf("%d static entities", len(t.Entities))
	case t.EntitiesFile != "":
		return "entities from " + t.EntitiesFile
	case t.EntitiesCommand != nil:
		return fmt.Sprintf("entities from command %q", t.EntitiesCommand[0])
	case t.EntitiesURL != "":
		return "entities from " + shownURL(t.EntitiesURL)
	}
	return "singleton"
}

// shownURL is an entities_url as tickd shows it: without its query, which
// may hold a token ("?…" says there was one).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	q := u.RawQuery
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	if q != "" {
		return u.String() + "?…"
	}
	return u.String()
}
