package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// TestBackfillInTheConsole: a backfill started with tickd backfill shows
// on its task's page in Chromium, with its progress, and ends there: its
// state, its ticks done and left, its runs; and in the console's JSON.
func TestBackfillInTheConsole(t *testing.T) {
	t.Parallel()
	tier.Full(t, "Chromium")
	browser := chromium(t)
	srv := redistest.Start(t)
	tickdtest.InitEpoch(t, srv.Addr, "tickd")
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	htpasswd := opsHtpasswd(t, dir)
	addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[daemon]
log_format = "json"
shutdown_timeout = "300ms"
[redis]
url = %q
[web]
listen = %q
htpasswd_file = %q
refresh = "1s"
[[tasks]]
name = "report"
every = "1m"
entities = ["a", "b", "c"]
command = [%q]
`, srv.URL(), addr, htpasswd, worker))
	d := tickdtest.Start(t, "A", []string{"TESTWORKER_LOG=" + filepath.Join(dir, "runs.log"), "TESTWORKER_MAX_SLEEP=20ms"}, "-config", cfg)
	d.WaitReady(20 * time.Second)
	to := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	var made report.BackfillDoc
	backfillCLI(t, &made, "-config", cfg, "report", "-from", to.Add(-29*time.Minute).Format(time.RFC3339), "-to", to.Format(time.RFC3339))
	expect.Equal(t, "the runs it starts", made.Runs, int64(90))

	ctx := headless(t, browser, time.Minute)
	var text string
	err := chromedp.Run(ctx, network.Enable(), network.SetExtraHTTPHeaders(network.Headers{"Authorization": "Basic " + basicAuth("ops", "s3cret")}),
		chromedp.Navigate("http://"+addr+"/tasks/report"),
		chromedp.WaitVisible(`#backfills`),
		// The page refreshes itself every second: the backfill ends there.
		chromedp.Poll(`document.querySelector("#backfills .backfill-state") && document.querySelector("#backfills .backfill-state").textContent == "ended"`, nil,
			chromedp.WithPollingTimeout(40*time.Second)),
		chromedp.Text(`#backfills`, &text))
	if err != nil {
		t.Fatalf("the task page's backfills: %v", err)
	}
	row := strings.Join(strings.Fields(text), " ")
	expect.True(t, "the row: its id, state, 30 ticks done, 0 left, 90 runs, none failed: "+row,
		strings.Contains(row, made.ID) && strings.Contains(row, "ended 30 0 90 0 0 0 0"))
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(new([]byte), 90)); err != nil {
		t.Fatal(err)
	}
	// The console's JSON has it too, as tickd status -json does.
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/status?task=report", nil)
	req.SetBasicAuth("ops", "s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st report.StatusDoc
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Backfills) != 1 {
		t.Fatalf("the console's status JSON: %v, backfills %+v", err, st.Backfills)
	}
	expect.Equal(t, "its JSON: id, state, ran", fmt.Sprint(st.Backfills[0].ID, " ", st.Backfills[0].State, " ", st.Backfills[0].Ran), made.ID+" ended 90")
}
