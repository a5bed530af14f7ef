package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// TestCheckEntityListsItsOwnTicks: check -entity lists an entity's next
// ticks in its own zone (timezone_from), with its attributes and the DST
// marks; an entity whose zone is no zone is a warning; one the source does
// not list says so; without -entity a task's entities are [].
func TestCheckEntityListsItsOwnTicks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	entities := filepath.Join(dir, "entities.jsonl")
	tickdtest.WriteFile(t, entities, `{"id": "shop-42", "tz": "America/New_York", "plan": "pro"}`+"\n"+`{"id": "mars", "tz": "Mars/Base"}`+"\n")
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, `[[tasks]]
name = "digest"
cron = "30 2 * * *"
timezone = "Europe/Berlin"
timezone_from = "tz"
entities_format = "jsonl"
entities_file = "`+entities+`"
command = ["true"]
`)
	code, js, errs := cli("check", "-config", cfg, "-json", "-entity", "shop-42", "-from", "2026-03-07T00:00:00Z", "-n", "3")
	expect.Equal(t, "check -json -entity: exit status "+errs, code, 0)
	checkSchema(t, js)
	var doc report.CheckDoc
	if err := json.Unmarshal([]byte(js), &doc); err != nil || len(doc.Tasks) != 1 || len(doc.Tasks[0].Entities) != 1 {
		t.Fatalf("check -json: %v %s", err, js)
	}
	e := doc.Tasks[0].Entities[0]
	expect.True(t, "found", e.Found)
	expect.Same(t, "attributes", e.Attributes, map[string]string{"tz": "America/New_York", "plan": "pro"})
	expect.Equal(t, "its zone", e.Timezone, "America/New_York")
	// New York springs forward on 2026-03-08: 02:30 does not exist that day.
	expect.Equal(t, "the first tick", e.Ticks[0].Local, "2026-03-07T02:30:00-05:00")
	expect.Equal(t, "the moved tick", e.Ticks[1].Tick.Time().UTC().Format(time.RFC3339), "2026-03-08T07:00:00Z")
	expect.True(t, "marked: "+e.Ticks[1].DST, strings.Contains(e.Ticks[1].DST, "spring forward"))

	_, text, _ := cli("check", "-config", cfg, "-entity", "shop-42", "-from", "2026-03-07T00:00:00Z", "-n", "2")
	expect.True(t, "the text lists them:\n"+text, strings.Contains(text, "entity shop-42 (plan=pro tz=America/New_York), in America/New_York:") &&
		strings.Contains(text, "2026-03-08T03:00:00-04:00   <- moved by daylight saving"))

	code, js, _ = cli("check", "-config", cfg, "-json", "-entity", "mars")
	expect.Equal(t, "an unknown zone is a warning, not a failure", code, 0)
	json.Unmarshal([]byte(js), &doc) //nolint:errcheck
	expect.True(t, "warned: "+strings.Join(doc.Warnings, "; "), strings.Contains(strings.Join(doc.Warnings, ";"), `"Mars/Base" is no IANA zone`))
	_, text, _ = cli("check", "-config", cfg, "-entity", "nobody")
	expect.True(t, "not listed:\n"+text, strings.Contains(text, "entity nobody: not listed by the source"))
	_, js, _ = cli("check", "-config", cfg, "-json")
	checkSchema(t, js)
	doc = report.CheckDoc{}
	json.Unmarshal([]byte(js), &doc) //nolint:errcheck
	expect.Equal(t, "no entities without -entity", len(doc.Tasks[0].Entities), 0)
}

// TestStatusShowsAnEntity: status TASK ENTITY shows the entity's
// attributes as its source gives them now, its zone and next tick there,
// and its last run; an entity whose zone is no zone says its runs are
// skipped; -json keeps the contract.
func TestStatusShowsAnEntity(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, false, `
[[tasks]]
name = "digest"
every = "1h"
catch_up = "1h"
timezone_from = "tz"
entities_format = "jsonl"
entities_command = ["sh", "-c", "echo '{\"id\": \"shop-42\", \"tz\": \"Asia/Tokyo\", \"plan\": \"pro\"}'; echo '{\"id\": \"mars\", \"tz\": \"Mars/Base\"}'"]
command = ["WORKER"]
`)
	e.daemon("A", "0s")
	var doc report.EntityDoc
	expect.WaitFor(t, 20*time.Second, "shop-42's run, in status", func() bool {
		code, js, _ := cli("status", "-config", e.cfg, "-json", "digest", "shop-42")
		return code == 0 && json.Unmarshal([]byte(js), &doc) == nil && len(doc.LastRuns) == 1
	})
	_, js, _ := cli("status", "-config", e.cfg, "-json", "digest", "shop-42")
	checkSchema(t, js)
	expect.True(t, "listed", doc.Listed)
	expect.Same(t, "its attributes", doc.Attributes, map[string]string{"tz": "Asia/Tokyo", "plan": "pro"})
	expect.Equal(t, "its zone", doc.Timezone, "Asia/Tokyo")
	expect.Equal(t, "its next tick, on the hour in Tokyo", doc.NextTick.Time().In(time.UTC).Minute(), 0)
	expect.Equal(t, "its last run", doc.LastRuns[0].Outcome, "done")

	code, text, errs := cli("status", "-config", e.cfg, "digest", "shop-42")
	expect.Equal(t, "status TASK ENTITY: "+errs, code, 0)
	expect.True(t, "the text shows them:\n"+text, strings.Contains(text, "attributes: plan=pro tz=Asia/Tokyo (entities from command \"sh\", read now)") &&
		strings.Contains(text, "zone: Asia/Tokyo, next tick ") && strings.Contains(text, "last run: done (tick)"))
	_, text, _ = cli("status", "-config", e.cfg, "digest", "mars")
	expect.True(t, "an unknown zone:\n"+text, strings.Contains(text, `zone: tz "Mars/Base" is no IANA zone: its runs are skipped`) && strings.Contains(text, "last run: none retained"))
	_, text, _ = cli("status", "-config", e.cfg, "digest", "nobody")
	expect.True(t, "not listed:\n"+text, strings.Contains(text, "not listed by its source"))
}

// TestCheckWarnsOfAnEntitiesURLsSecrets: check warns of a token in
// entities_url's query, and of entities_headers sent over plain http to
// another host (not to this one's loopback).
func TestCheckWarnsOfAnEntitiesURLsSecrets(t *testing.T) {
	t.Setenv("TICKD_TEST_CRM_TOKEN", "s3cret")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, `[[tasks]]
name = "crm"
every = "1h"
command = ["true"]
entities_url = "http://crm.example.com/shops?token=abc"
entities_headers = { Authorization = "Bearer ${TICKD_TEST_CRM_TOKEN}" }

[[tasks]]
name = "local"
every = "1h"
command = ["true"]
entities_url = "http://127.0.0.1:9/shops"
entities_headers = { Authorization = "Bearer ${TICKD_TEST_CRM_TOKEN}" }
`)
	code, js, errs := cli("check", "-config", cfg, "-json")
	expect.Equal(t, "check: "+errs, code, 0)
	var doc report.CheckDoc
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(doc.Warnings, "\n")
	expect.True(t, "the query warned of:\n"+all, strings.Contains(all, "(crm): entities_url: it carries a query"))
	expect.True(t, "the clear headers warned of:\n"+all, strings.Contains(all, "(crm): entities_url: its entities_headers go in clear over http:// to crm.example.com"))
	expect.True(t, "not for loopback:\n"+all, !strings.Contains(all, "(local)"))
	expect.True(t, "the token is in no warning", !strings.Contains(all, "s3cret"))
}
