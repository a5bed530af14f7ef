package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Attributes are an entity's attributes, by name: what its source said of
// it beside its id (a time zone, a tenant, a weight). Names are
// [a-z][a-z0-9_]*, at most MaxAttrName bytes; values are text, at most
// MaxAttrValue bytes, with no NUL; an entity has at most MaxAttrs. A run
// sees its entity's (Run.Attributes): an exec command as TICKD_ATTR_NAME
// variables, an HTTP action in its body. No attribute is ever put into a
// command's argv or a URL. A nil Attributes is an entity without any.
type Attributes map[string]string

// The bounds of an entity's attributes.
const (
	MaxAttrs     = 16
	MaxAttrName  = 32
	MaxAttrValue = 256
)

// ErrBadAttribute describes an entity line whose attributes break the
// bounds of Attributes: the line is skipped.
var ErrBadAttribute = errors.New("bad entity attribute")

// Check says why a cannot be an entity's attributes, or nil.
func (a Attributes) Check() error {
	if len(a) > MaxAttrs {
		return fmt.Errorf("%w: %d attributes, more than %d", ErrBadAttribute, len(a), MaxAttrs)
	}
	for _, name := range slices.Sorted(maps.Keys(a)) {
		if !validAttrName(name) {
			return fmt.Errorf("%w: name %q: want [a-z][a-z0-9_]*, at most %d bytes", ErrBadAttribute, cut(name, 40), MaxAttrName)
		}
		v := a[name]
		switch {
		case len(v) > MaxAttrValue:
			return fmt.Errorf("%w: %s: longer than %d bytes", ErrBadAttribute, name, MaxAttrValue)
		case strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("%w: %s: holds a NUL byte", ErrBadAttribute, name)
		case !utf8.ValidString(v):
			return fmt.Errorf("%w: %s: not valid UTF-8", ErrBadAttribute, name)
		}
	}
	return nil
}

// validAttrName says whether name is [a-z][a-z0-9_]* of at most
// MaxAttrName bytes.
func validAttrName(name string) bool {
	if name == "" || len(name) > MaxAttrName || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// cut is s's first n bytes, for an error message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// Entity is one entity a source yields: its id and its attributes (nil
// from a source of bare ids).
type Entity struct {
	ID         string
	Attributes Attributes
}

// EntitySource is a Source whose entities carry attributes: the scheduler
// reads it with EachEntity, and Each yields the same entities' ids.
type EntitySource interface {
	Source
	EachEntity(ctx context.Context, fn func(Entity) error) error
}

// EachEntity reads src's entities: with their attributes from an
// EntitySource, as bare ids from any other Source.
func EachEntity(ctx context.Context, src Source, fn func(Entity) error) error {
	if es, ok := src.(EntitySource); ok {
		return es.EachEntity(ctx, fn)
	}
	return src.Each(ctx, func(id string) error { return fn(Entity{ID: id}) })
}

// The formats of an entity file or command's output (File.Format,
// Command.Format).
const (
	// FormatLines is one id a line: the default.
	FormatLines = "lines"
	// FormatJSONL is one JSON object a line: {"id": "shop-42", "tz":
	// "Europe/Berlin"}. id is required; every other member is an
	// attribute, a string (a number is kept as its text; null is no
	// attribute).
	FormatJSONL = "jsonl"
)

// ValidFormat says whether f is an entity format: "", FormatLines or
// FormatJSONL.
func ValidFormat(f string) bool { return f == "" || f == FormatLines || f == FormatJSONL }

// ParseEntityLine reads one line of FormatJSONL: a JSON object with a
// string (or number) id and string (or number) attributes within the
// bounds of Attributes.
func ParseEntityLine(line string) (Entity, error) {
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return Entity{}, fmt.Errorf("%w: not a JSON object: %v", ErrBadID, err)
	}
	if m == nil {
		return Entity{}, fmt.Errorf("%w: not a JSON object", ErrBadID)
	}
	if d.More() {
		return Entity{}, fmt.Errorf("%w: more than one JSON value on the line", ErrBadID)
	}
	var e Entity
	for k, v := range m {
		if v == nil && k != "id" {
			continue // null: no such attribute (a database's NULL)
		}
		s, ok := jsonText(v)
		if !ok {
			return Entity{}, fmt.Errorf("%w: %s: want a string or a number", ErrBadAttribute, cut(k, 40))
		}
		if k == "id" {
			e.ID = s
			continue
		}
		if e.Attributes == nil {
			e.Attributes = make(Attributes, len(m)-1)
		}
		e.Attributes[k] = s
	}
	if _, ok := m["id"]; !ok {
		return Entity{}, fmt.Errorf("%w: no \"id\" member", ErrBadID)
	}
	if err := CheckID(e.ID); err != nil {
		return Entity{}, err
	}
	if err := e.Attributes.Check(); err != nil {
		return Entity{}, err
	}
	return e, nil
}

// jsonText is a JSON string's or number's text.
func jsonText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	}
	return "", false
}

// maxJSONLine bounds a line of FormatJSONL: an id and MaxAttrs attributes
// at their longest, quoted and escaped.
const maxJSONLine = maxIDLen + MaxAttrs*(MaxAttrName+6*MaxAttrValue+8) + 64

// entityLines reads entities from r in format, calling fn for each. A
// line it cannot use is skipped and reported (the first few, then a
// count), with its line number: the rest of the list still loads.
func entityLines(ctx context.Context, r *lineReader, format string, fn func(Entity) error) error {
	jsonl := format == FormatJSONL
	for {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		s, line, err := r.next()
		if err != nil {
			r.done()
			if errors.Is(err, errEnd) {
				return nil
			}
			return err
		}
		var e Entity
		var bad error
		if jsonl {
			e, bad = ParseEntityLine(s)
		} else {
			e.ID, bad = s, CheckID(s)
		}
		if bad != nil {
			r.skip(line, bad)
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}
