package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// chromium finds Debian's chromium, or fails the test saying how to get it:
// the browser test does not skip.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: the console's browser test needs it (Debian: apt-get install -y chromium; .ci/run installs it)")
	return ""
}

// screenshotDir is where the browser test saves its screenshots: the
// docs' own with TICKD_UPDATE_SCREENSHOTS=1, TICKD_ARTIFACTS when set (CI
// keeps them), else the test's temporary directory.
func screenshotDir(t *testing.T) string {
	switch {
	case os.Getenv("TICKD_UPDATE_SCREENSHOTS") == "1":
		return filepath.Join("..", "..", "docs", "screenshots")
	case os.Getenv("TICKD_ARTIFACTS") != "":
		return os.Getenv("TICKD_ARTIFACTS")
	}
	return t.TempDir()
}

// TestConsoleInABrowser drives the console of a real daemon on a real
// Redis in headless Chromium, as an admin, through a reverse proxy that
// serves it under /tickd ([web] base_path): the tasks, a task, a trigger
// and its answer, the new ticks in the chart, a pause with a reason seen on
// the tasks page, a resume, the entity "x y" reached by its link and
// triggered from its page (not "x+y", as when links were encoded twice),
// and an unlock after typing the entity id.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	tier.Full(t, "Chromium")
	browser := chromium(t)
	srv := redistest.Start(t)
	tickdtest.InitEpoch(t, srv.Addr, "tickd")
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	htpasswd := opsHtpasswd(t, dir)
	addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	// The monitor of the heartbeat and the traces' collector: anything is
	// taken.
	monitor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer monitor.Close()
	shops := filepath.Join(dir, "shops.jsonl")
	tickdtest.WriteFile(t, shops, `{"id": "shop-42", "tz": "Asia/Kolkata", "plan": "<b>pro</b>"}`+"\n")
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[daemon]
log_format = "json"
shutdown_timeout = "300ms"
[redis]
url = %[1]q
[web]
listen = %[2]q
htpasswd_file = %[3]q
admins = ["ops"]
refresh = "1s"
base_path = "/tickd"
[telemetry]
endpoint = %[5]q
[[limits]]
name = "users-api"
concurrency = 4
fair_by = "plan"
[[limits]]
name = "mail-api"
rate = "auto"
[[tasks]]
name = "sync-users"
every = "2s"
lease_ttl = "3s"
timezone = "Europe/Berlin"
entities = ["alpha", "beta", "<b>gamma</b>", "x y", "x+y", "nl\nx", "nl\r\nx"]
command = [%[4]q]
limits = ["users-api"]
heartbeat_url = "%[5]s/ping/check"
[[tasks]]
name = "digest"
every = "1h"
catch_up = "1h"
timezone_from = "tz"
entities_format = "jsonl"
entities_file = %[6]q
command = [%[4]q]
limits = ["mail-api"]
`, srv.URL(), addr, htpasswd, worker, monitor.URL, shops))
	d := tickdtest.Start(t, "A", []string{"TESTWORKER_LOG=" + filepath.Join(dir, "runs.log"), "TESTWORKER_MAX_SLEEP=50ms",
		"TESTWORKER_SLOW=beta", "TESTWORKER_SLOW_SLEEP=1h"}, "-config", cfg)
	d.WaitReady(20 * time.Second)
	// The reverse proxy: /tickd/ goes to tickd as it is; nothing else may
	// be asked for.
	target, _ := url.Parse("http://" + addr)
	mux := http.NewServeMux()
	mux.Handle("/tickd/", httputil.NewSingleHostReverseProxy(target))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the browser asked for %s, outside /tickd/", r.URL)
		http.NotFound(w, r)
	})
	proxy := httptest.NewServer(mux)
	defer proxy.Close()
	base := proxy.URL + "/tickd"

	ctx := headless(t, browser, 2*time.Minute)
	shots := screenshotDir(t)
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var b []byte
			if err := chromedp.FullScreenshot(&b, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), b, 0o644)
		})
	}
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// click clicks sel, and again should the page's refresh replace the
	// element between chromedp's finding it and its click (CI: "Could not
	// find node with given id"): a user's click lands on whichever is there.
	click := func(sel string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			for attempt := 1; ; attempt++ {
				err := chromedp.Click(sel).Do(ctx)
				if err == nil || attempt == 5 || !strings.Contains(err.Error(), "Could not find node") {
					return err
				}
			}
		})
	}
	// Log in: the browser sends the user's credentials with every request.
	run("log in", network.Enable(), network.SetExtraHTTPHeaders(network.Headers{"Authorization": "Basic " + basicAuth("ops", "s3cret")}))

	var text string
	run("the tasks page", chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`a[href="/tickd/tasks/sync-users"]`),
		chromedp.WaitVisible(`tr:has(a[href="/tickd/tasks/sync-users"]) svg.spark rect.done`), // a tick of it ran and is in the history
		chromedp.Text("main", &text))
	expect.True(t, "the tasks page shows the schedule in words and the zone", strings.Contains(text, "every 2 seconds") && strings.Contains(text, "Europe/Berlin"))
	expect.True(t, "the tasks page shows the limit and its runs (beta's, at least)", strings.Contains(text, "users-api") && strings.Contains(text, "4 at once") &&
		regexp.MustCompile(`users-api\s+[1-4]/4`).MatchString(text))
	expect.True(t, "the tasks page says where the limit's rate came from", regexp.MustCompile(`rate (not learned yet|[0-9.]+/s learned from)`).MatchString(text))
	expect.True(t, "the tasks page says the fair limit's groups", regexp.MustCompile(`\d+ groups waiting; of the last minute's \d+ starts`).MatchString(text))
	run("screenshot of the tasks page", shot("tasks.png"))

	var bars int
	run("the task page", click(`a[href="/tickd/tasks/sync-users"]`), chromedp.WaitVisible(`svg.chart`),
		chromedp.Evaluate(`document.querySelectorAll("svg.chart g").length`, &bars))
	expect.True(t, "the chart has ticks", bars > 0)
	// The legend's swatch for runs waiting for a limit is drawn by the
	// style sheet (no inline style under the CSP): a colour, not nothing.
	var swatch string
	run("the chart's legend", chromedp.Evaluate(`getComputedStyle(document.querySelector(".legend i.skip-limited")).backgroundColor`, &swatch))
	expect.Equal(t, "the waiting swatch's colour", swatch, "rgb(245, 215, 110)")
	// The ticks' end pings and traces, in their columns.
	run("a tick's end ping and its trace", chromedp.Poll(
		`[...document.querySelectorAll("main td.ping")].some(td => /^(success|fail)$/.test(td.textContent)) &&
		 [...document.querySelectorAll("main code.trace")].some(c => /^[0-9a-f]{32}$/.test(c.textContent))`, nil, chromedp.WithPollingTimeout(20*time.Second)))
	var axis []string
	run("the chart's time axis", chromedp.Evaluate(`[...document.querySelectorAll("svg.chart text.axis")].map(t => t.textContent)`, &axis))
	expect.True(t, fmt.Sprintf("the chart's time axis is labelled with times: %q", axis), len(axis) >= 1 && strings.Count(axis[0], ":") == 2)
	run("a tick's row says why, beside its state", chromedp.Poll(
		`[...document.querySelectorAll("main td")].some(td => /^complete \((on time|late by .+)\)$/.test(td.textContent))`, nil,
		chromedp.WithPollingTimeout(15*time.Second)))
	run("screenshot of the task page", shot("task.png"))

	// What the user typed outlives the page's refreshes: a refresh replaces
	// only the parts that changed, and never a form being filled in.
	var typed string
	run("type an entity, then look away", chromedp.SendKeys(`textarea[name=entities]`, "alpha"),
		chromedp.Evaluate(`document.activeElement.blur(); window.refreshes = 0;
			document.addEventListener("tickd:refreshed", () => window.refreshes++)`, nil),
		chromedp.Poll(`window.refreshes >= 2`, nil, chromedp.WithPollingTimeout(15*time.Second)),
		chromedp.Value(`textarea[name=entities]`, &typed))
	expect.Equal(t, "the typed entity after two refreshes", typed, "alpha")

	// Trigger alpha and watch its answer arrive.
	var outcome string
	run("trigger", chromedp.Submit(`textarea[name=entities]`),
		chromedp.WaitVisible(`td.outcome`),
		chromedp.Poll(`document.querySelector("td.outcome") && document.querySelector("td.outcome").textContent === "done"`, nil,
			chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text(`td.outcome`, &outcome))
	expect.Equal(t, "the trigger's answer", outcome, "done")
	run("the trigger page stops refreshing once answered", chromedp.Poll(
		`document.getElementById("answers-state").textContent.includes("no longer refreshes")`, nil, chromedp.WithPollingTimeout(10*time.Second)))
	run("screenshot of a trigger's answers", shot("trigger.png"))

	// The chart gains ticks while the page refreshes itself.
	run("new ticks in the chart", chromedp.Navigate(base+"/tasks/sync-users"), chromedp.WaitVisible(`svg.chart`),
		chromedp.Evaluate(`document.querySelectorAll("svg.chart g").length`, &bars),
		chromedp.Poll(fmt.Sprintf(`document.querySelectorAll("svg.chart g").length > %d`, bars), nil, chromedp.WithPollingTimeout(30*time.Second)))

	// Pause with a reason and an end; the tasks page says so.
	run("pause", chromedp.SendKeys(`input[name=reason]`, "db migration <tonight>"), chromedp.SendKeys(`input[name=for]`, "2h"),
		chromedp.Submit(`input[name=reason]`), chromedp.WaitVisible(`p.flash`),
		chromedp.Navigate(base+"/"), chromedp.WaitVisible(`span.paused`), chromedp.Text("main", &text))
	expect.True(t, "the tasks page shows the pause, who and why", strings.Contains(text, "db migration <tonight>") && strings.Contains(text, "ops (console)"))
	// One form for every time, the server's and the viewer's; inside a
	// badge, the viewer's time keeps the badge's white (not grey on brown).
	var forms []string
	run("the times' forms", chromedp.Evaluate(`[...document.querySelectorAll("main time")].map(t => t.textContent + "|" + (t.nextElementSibling ? t.nextElementSibling.textContent : ""))`, &forms))
	timeForm := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z0-9+-]+\| \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d yours\)$`)
	for _, f := range forms {
		expect.True(t, "a time in the pages' one form: "+f, timeForm.MatchString(f))
	}
	var colors []string
	// A closed limit's badge ("until" and its time) as the tasks page
	// writes it, with the viewer's time app.js adds.
	run("the viewer's time in a badge", chromedp.Evaluate(`(() => {
		const b = document.createElement("span"); b.className = "flag";
		b.innerHTML = 'until <time datetime="2026-01-01T00:00:00Z">x</time><span class="viewer muted">y</span>';
		document.querySelector("main").append(b);
		const c = [getComputedStyle(b).color, getComputedStyle(b.querySelector(".viewer")).color];
		b.remove(); return c; })()`, &colors))
	expect.True(t, fmt.Sprintf("the viewer's time in a badge is the badge's colour: %v", colors), len(colors) == 2 && colors[0] == colors[1])
	run("the paused task's page", chromedp.Navigate(base+"/tasks/sync-users"), chromedp.WaitVisible(`svg.chart`), chromedp.Text("main", &text))
	expect.True(t, "a paused task's next ticks say why there are none", strings.Contains(text, "Next ticks: none while it is paused."))
	run("back to the tasks page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(`span.paused`))
	run("screenshot of a paused task", shot("paused.png"))
	run("resume", chromedp.Navigate(base+"/tasks/sync-users"), chromedp.WaitVisible(`form[action$="/resume"] button`),
		click(`form[action$="/resume"] button`), chromedp.WaitVisible(`p.flash`),
		chromedp.Navigate(base+"/"), chromedp.WaitVisible(`a[href="/tickd/tasks/sync-users"]`), chromedp.Text("main", &text))
	expect.True(t, "resumed", !strings.Contains(text, "db migration") && strings.Contains(text, "running"))

	// "x y", reached by its link on the task page, triggered from its own
	// page: the answer is for "x y" itself.
	var answered string
	run("trigger x y from its page", chromedp.Navigate(base+"/tasks/sync-users"),
		chromedp.Poll(`[...document.querySelectorAll("td a")].some(a => a.textContent === "x y")`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`[...document.querySelectorAll("td a")].find(a => a.textContent === "x y").click()`, nil),
		chromedp.WaitVisible(`form[action$="/trigger"] button`), chromedp.Text("h1", &text),
		click(`form[action$="/trigger"] button`), chromedp.WaitVisible(`td.outcome`),
		chromedp.Text(`tbody td a`, &answered))
	expect.Equal(t, "the entity page reached from the x y link", strings.TrimSpace(text[strings.LastIndex(text, "/")+1:]), "x y")
	expect.Equal(t, "the entity triggered from the x y page", answered, "x y")

	// "nl\nx" (a newline in the id; "nl\r\nx" exists too), triggered from
	// its page: the browser submits a newline in a field as CRLF, and the
	// answer must be for "nl\nx", not "nl\r\nx".
	var href string
	var found bool
	run("trigger nl\\nx from its page", chromedp.Navigate(base+"/tasks/sync-users/entity?id=nl%0Ax"),
		chromedp.WaitVisible(`form[action$="/trigger"] button`), click(`form[action$="/trigger"] button`),
		chromedp.WaitVisible(`td.outcome`), chromedp.AttributeValue(`tbody td a`, "href", &href, &found))
	expect.True(t, "the answer is for nl\\nx itself: "+href, strings.HasSuffix(strings.ToUpper(href), "ID=NL%0AX"))

	// beta's run sleeps for ever: unlock it, typing its id.
	run("unlock", chromedp.Navigate(base+"/tasks/sync-users/entity?id=beta"),
		chromedp.Poll(`document.querySelector("input[name=confirm]") !== null`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Navigate(base+"/tasks/sync-users/entity?id=beta"), chromedp.WaitVisible(`input[name=confirm]`),
		shot("entity.png"),
		chromedp.SendKeys(`input[name=confirm]`, "beta"), chromedp.Submit(`input[name=confirm]`),
		chromedp.WaitVisible(`p.flash`), chromedp.Text("main", &text))
	expect.True(t, "unlocked: "+text, strings.Contains(text, "Done: revoked the lease of sync-users/beta"))

	// At 1280px no column heading breaks ("runnin g"); on a phone the page
	// does not scroll sideways (a wide table scrolls in its own box).
	oneLine := `[...document.querySelectorAll("th")].every(th => th.offsetHeight <= 1.6 * parseFloat(getComputedStyle(th).lineHeight) + 12)`
	fits := `document.documentElement.scrollWidth <= window.innerWidth + 1`
	for _, page := range []string{"/", "/tasks/sync-users", "/actions", "/failures"} {
		var ok bool
		run("headings on one line at 1280px: "+page, chromedp.Navigate(base+page), chromedp.WaitVisible("table"), chromedp.Evaluate(oneLine, &ok))
		expect.True(t, "headings on one line at 1280px on "+page, ok)
		run("a phone: "+page, chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+page), chromedp.WaitVisible("table"),
			chromedp.Evaluate(fits, &ok))
		expect.True(t, "no sideways scroll on a phone on "+page, ok)
		if page == "/" {
			run("screenshot of the tasks page on a phone", shot("phone-tasks.png"))
		}
		run("back to 1280px", chromedp.EmulateViewport(1280, 900))
	}

	// An entity's attributes and zone, and the zones its task's ticks served.
	run("an entity's page", chromedp.Navigate(base+"/tasks/digest/entity?id=shop-42"), chromedp.WaitVisible(`table.attributes`), chromedp.Text("main", &text))
	expect.True(t, "its attributes, as text, and its zone:\n"+text, strings.Contains(text, "plan\t<b>pro</b>") && strings.Contains(text, "Zone: Asia/Kolkata; next tick"))
	expect.WaitFor(t, 20*time.Second, "the task page, its tick's zone", func() bool {
		run("the digest's page", chromedp.Navigate(base+"/tasks/digest"), chromedp.WaitVisible(`main`), chromedp.Text("main", &text))
		return strings.Contains(text, "zones: Asia/Kolkata")
	})

	run("the actions log", chromedp.Navigate(base+"/actions"), chromedp.WaitVisible(`table`), chromedp.Text("main", &text))
	for _, want := range []string{"trigger", "pause", "resume", "unlock", "ops (console)"} {
		expect.True(t, "the actions log has "+want, strings.Contains(text, want))
	}
	run("screenshot of the actions log", shot("actions.png"))
	t.Logf("screenshots in %s", shots)
}

// headless is a headless Chromium's context, for at most timeout, closed
// when the test ends.
func headless(t *testing.T, browser string, timeout time.Duration) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTime(); cancel(); cancelAlloc() })
	return ctx
}

// opsHtpasswd writes, in dir, an htpasswd file of the user ops, password
// s3cret, and returns its path.
func opsHtpasswd(t *testing.T, dir string) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "htpasswd")
	tickdtest.WriteFile(t, path, "ops:"+string(hash)+"\n")
	return path
}

func basicAuth(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}
