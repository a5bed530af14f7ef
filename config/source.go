package config

import (
	"log/slog"
	"net/url"

	"github.com/tickd/tickd/tasks"
)

// validateSource checks the entity source: at most one, and its ids.
func validateSource(t *Task, bad badFunc) {
	if count(t.Entities != nil, t.EntitiesFile != "", t.EntitiesCommand != nil, t.EntitiesURL != "") > 1 {
		bad("entities", "give only one of entities, entities_file, entities_command, entities_url")
	}
	if t.EntitiesCommand != nil && (len(t.EntitiesCommand) == 0 || t.EntitiesCommand[0] == "") {
		bad("entities_command", "empty argv")
	}
	validateEntitiesURL(t, bad)
	checkAttrKey(t, bad, "timezone_from", t.TimezoneFrom)
	checkAttrKey(t, bad, "priority_from", t.PriorityFrom)
	switch {
	case !tasks.ValidFormat(t.EntitiesFormat):
		bad("entities_format", "%q: want \"lines\" (one id a line) or \"jsonl\" (one JSON object a line, with attributes)", t.EntitiesFormat)
	case t.EntitiesFormat != "" && t.EntitiesFile == "" && t.EntitiesCommand == nil && t.EntitiesURL == "":
		bad("entities_format", "is for entities_file, entities_command or entities_url: give one of them")
	}
	for j, id := range t.Entities {
		if id == "" {
			bad("entities", "entity %d is empty", j)
		} else if err := tasks.CheckID(id); err != nil {
			bad("entities", "entity %d: %v", j, err)
		}
	}
}

// checkAttrKey checks key, which names an entity attribute (name): a
// name that can be one, of a source whose lines carry attributes.
func checkAttrKey(t *Task, bad badFunc, key, name string) {
	if checkAttrName(bad, key, name) && name != "" && t.EntitiesFormat != tasks.FormatJSONL {
		bad(key, "names an entity attribute: give entities_format = \"jsonl\", whose lines carry them (or entities_url)")
	}
}

// checkAttrName checks that key's name ("": none) can name an entity
// attribute, and says whether it can.
func checkAttrName(bad badFunc, key, name string) bool {
	if name != "" && (tasks.Attributes{name: ""}).Check() != nil {
		bad(key, "%q: an attribute's name: [a-z][a-z0-9_]*, at most %d bytes", name, tasks.MaxAttrName)
		return false
	}
	return true
}

// validateEntitiesURL checks entities_url and the keys that go with it
// alone: its answer is JSON (entities_format "jsonl", which it takes for
// granted), its headers are its own (never the action's: a token for one
// host is not sent to another).
func validateEntitiesURL(t *Task, bad badFunc) {
	if t.EntitiesURL == "" {
		if len(t.EntitiesHeaders) > 0 {
			bad("entities_headers", "only entities_url sends headers")
		}
		return
	}
	u, err := url.Parse(t.EntitiesURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		bad("entities_url", "not an http:// or https:// URL")
	case u.User != nil:
		bad("entities_url", "holds a user and password: give them as entities_headers (Authorization = \"Basic ${TOKEN}\"), which are never shown")
	}
	switch t.EntitiesFormat {
	case "":
		t.EntitiesFormat = tasks.FormatJSONL
	case tasks.FormatLines:
		bad("entities_format", "entities_url answers JSON (JSON lines or one array): leave entities_format out, or give \"jsonl\"")
	}
	if t.EntitiesMaxAge < 0 {
		bad("entities_max_age", "must not be negative")
	}
	t.EntitiesHeaders = expandHeaders("entities_headers", t.EntitiesHeaders, bad)
}

// Source is where the task's entities come from; a singleton's one entity
// is its name. log (may be nil) hears about skipped bad lines. An
// entities_url's source keeps the last list it read: keep it (the
// scheduler does, across reloads that leave it as it was).
func (t *Task) Source(log *slog.Logger) tasks.Source {
	switch {
	case t.Entities != nil:
		return tasks.Static(t.Entities)
	case t.EntitiesFile != "":
		return tasks.File{Path: t.EntitiesFile, Format: t.EntitiesFormat, Log: log}
	case t.EntitiesCommand != nil:
		return tasks.Command{Argv: t.EntitiesCommand, Timeout: t.EntitiesTimeout, Format: t.EntitiesFormat, Log: log}
	case t.EntitiesURL != "":
		return &tasks.Endpoint{URL: t.EntitiesURL, Headers: t.EntitiesHeaders, Timeout: t.EntitiesTimeout, MaxAge: t.EntitiesMaxAge, Log: log}
	}
	return tasks.Static{t.Name}
}
