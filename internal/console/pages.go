package console

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/registry"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/lease/driver"
)

// What a page reads is bounded, whatever the number of entities: the
// newest tick records and actions, a page of entities (at most maxScan
// looked at for a search), the first pending requests.
const (
	recentTicks = 40
	recentFails = 10
	entityRows  = 50
	maxScan     = 10000
	pendingRows = 20
)

// Page is what every page's layout needs (exported for the templates only).
type Page struct {
	Title   string
	User    string
	Admin   bool
	Refresh int // seconds
	Now     time.Time
	Flash   string
}

func (c *Console) page(r *http.Request, title string) Page {
	u := userOf(r)
	return Page{Title: title, User: u.Name, Admin: u.Role == Admin, Refresh: int(c.refresh.Seconds()), Now: time.Now(),
		Flash: c.flashes.take(u.Name, r.URL.Query().Get("done"))}
}

// render writes template name with data, or a 500 that says what failed.
func (c *Console) render(w http.ResponseWriter, name string, data any) {
	var b bytes.Buffer
	if err := c.pages.ExecuteTemplate(&b, name, data); err != nil {
		c.log.Error("console page", "page", name, "error", err)
		http.Error(w, "page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes()) //nolint:errcheck // the client went away
}

// fail answers a store error.
func (c *Console) fail(w http.ResponseWriter, err error) {
	http.Error(w, "cannot read the store: "+err.Error(), http.StatusBadGateway)
}

// task finds the path's task, or answers 404.
func (c *Console) task(w http.ResponseWriter, r *http.Request) (*config.Task, bool) {
	name := r.PathValue("task")
	if t, ok := c.cfg().Task(name); ok {
		return t, true
	}
	if o, ok := c.unlisted(r.Context(), name); ok {
		return &o.Task, true
	}
	http.Error(w, "no such task in the config nor in the task registry", http.StatusNotFound)
	return nil, false
}

// unlisted returns the task named name of the task registry that the config
// does not list, if any.
func (c *Console) unlisted(ctx context.Context, name string) (*registry.Orphan, bool) {
	o, err := report.Unlisted(ctx, c.store, c.cfg(), name)
	return o, err == nil && o != nil
}

// taskRow is a task as the tasks page and the task page show it.
type taskRow struct {
	T        *config.Task
	Schedule string // as written
	Words    string // in words
	Next     []time.Time
	Paused   bool
	Pause    driver.PauseInfo
	Health   history.Health
	Ticks    []history.TickView // newest first
	Last     *history.TickView  // the newest not running
	Replicas []string           // the replicas running it
	Actions  []driver.Action    // its newest actions
	// Unlisted is, for a task the config does not list (the task registry
	// remembers it), what the registry keeps; nil otherwise.
	Unlisted *driver.TaskInfo
}

// world is what every task row needs that is read once a page.
type world struct {
	pauses   map[string]driver.PauseInfo
	replicas []driver.Replica
	orphans  []registry.Orphan // the task registry's tasks the config does not list
}

// tracesWhere is where the ticks' traces go, as a task's page says it: a
// collector's site (never its path, credentials or query), or what the
// tickd said ("the program's TracerProvider"); "" when not traced.
func (c *Console) tracesWhere() string {
	if c.traces != nil {
		if u, err := url.Parse(*c.traces); err == nil && u.Host != "" {
			return siteOf(*c.traces)
		}
		return *c.traces
	}
	if where := telemetry.Endpoint(c.cfg().Telemetry, os.Getenv); where != "" {
		return siteOf(where)
	}
	return ""
}

func (c *Console) readWorld(ctx context.Context) (world, error) {
	var wd world
	var err error
	if wd.pauses, err = c.store.Fleet().Pauses(ctx); err != nil {
		return wd, err
	}
	if wd.replicas, err = c.store.Fleet().Replicas(ctx); err != nil {
		return wd, err
	}
	reg, err := c.store.Fleet().Registry(ctx)
	if err != nil {
		return wd, err
	}
	wd.orphans = registry.Orphans(c.cfg(), reg)
	return wd, nil
}

// taskRows reads the rows of ts (with up to ticks ticks each), their
// histories in one round trip.
func (c *Console) taskRows(ctx context.Context, ts []*config.Task, wd world, ticks int) ([]taskRow, error) {
	ps, err := history.ReadPasts(ctx, c.store, ts, ticks, history.RecentActions, wd.pauses, wd.replicas)
	if err != nil {
		return nil, err
	}
	rows := make([]taskRow, len(ts))
	now := time.Now()
	for i, t := range ts {
		row := taskRow{T: t, Schedule: t.ScheduleText(), Words: words(t)}
		var orphan *registry.Orphan
		for j := range wd.orphans {
			if wd.orphans[j].Name == t.Name {
				orphan = &wd.orphans[j]
			}
		}
		row.Pause, row.Paused = wd.pauses[t.Name]
		// A paused task, or one no config lists, has no next ticks to show.
		for at := now; len(row.Next) < 3 && orphan == nil && !row.Paused; {
			if at = t.Schedule.Next(at); at.IsZero() {
				break
			}
			row.Next = append(row.Next, at)
		}
		p := ps[i]
		row.Actions = p.Actions
		row.Ticks, row.Health = history.Assess(t, now, p)
		if orphan != nil {
			row.Ticks, row.Health = history.AssessOrphan(orphan, now, p)
			row.Unlisted = &orphan.Info
		}
		row.Ticks = row.Ticks[:min(len(row.Ticks), ticks)]
		for i := range row.Ticks {
			if row.Ticks[i].State != history.TickRunning {
				row.Last = &row.Ticks[i]
				break
			}
		}
		row.Replicas = registry.RunnerIDs(wd.replicas, t.Name)
		rows[i] = row
	}
	return rows, nil
}

// taskRows is how many tasks the tasks page shows at once.
const taskRows = 50

// tasksPage shows a page of the tasks, by name, optionally those whose
// name contains q: what it reads from the store is bounded by the page
// (the pauses, the replicas and the task registry once, then each shown
// task's recent ticks and actions), whatever the number of tasks.
func (c *Console) tasksPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	wd, err := c.readWorld(ctx)
	if err != nil {
		c.fail(w, err)
		return
	}
	q := r.URL.Query()
	data := struct {
		Page
		Tasks            []taskRow
		Query            string
		Shown, Total     int
		From             int // the first row shown, from 1
		PrevURL, NextURL string
		Limits           []report.LimitStatus
	}{Page: c.page(r, "Tasks"), Query: strings.TrimSpace(q.Get("q"))}
	cfg := c.cfg()
	if data.Limits, err = report.ReadLimits(ctx, c.store, cfg); err != nil {
		c.fail(w, err)
		return
	}
	var ts []*config.Task
	for i := range cfg.Tasks {
		ts = append(ts, &cfg.Tasks[i])
	}
	for i := range wd.orphans {
		ts = append(ts, &wd.orphans[i].Task)
	}
	ts = slices.DeleteFunc(ts, func(t *config.Task) bool {
		return data.Query != "" && !strings.Contains(strings.ToLower(t.Name), strings.ToLower(data.Query))
	})
	slices.SortFunc(ts, func(a, b *config.Task) int { return strings.Compare(a.Name, b.Name) })
	data.Total = len(ts)
	from := 0
	if f, err := strconv.Atoi(q.Get("from")); q.Get("from") != "" && (err != nil || f < 0) {
		http.Error(w, "from: want a row number", http.StatusBadRequest)
		return
	} else if err == nil {
		from = min(f, len(ts))
	}
	page := ts[from:min(from+taskRows, len(ts))]
	data.From, data.Shown = from+1, len(page)
	link := func(f int) string {
		v := url.Values{}
		if data.Query != "" {
			v.Set("q", data.Query)
		}
		if f > 0 {
			v.Set("from", strconv.Itoa(f))
		}
		if len(v) == 0 {
			return c.url("/")
		}
		return c.url("/") + "?" + v.Encode()
	}
	if from > 0 {
		data.PrevURL = link(max(0, from-taskRows))
	}
	if from+taskRows < len(ts) {
		data.NextURL = link(from + taskRows)
	}
	if data.Tasks, err = c.taskRows(ctx, page, wd, 20); err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "tasks.html", data)
}

func (c *Console) taskPage(w http.ResponseWriter, r *http.Request) {
	t, ok := c.task(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	wd, err := c.readWorld(ctx)
	if err != nil {
		c.fail(w, err)
		return
	}
	rows, err := c.taskRows(ctx, []*config.Task{t}, wd, recentTicks)
	if err != nil {
		c.fail(w, err)
		return
	}
	row := rows[0]
	q := r.URL.Query()
	pq := driver.PageQuery{Cursor: q.Get("cursor"), Search: q.Get("q"), Substring: q.Get("mode") == "substring",
		Outcome: q.Get("outcome"), Size: entityRows, MaxScan: maxScan}
	if o := driver.Outcome(pq.Outcome); o != "" && o != "held" && o.Index() < 0 {
		http.Error(w, fmt.Sprintf("outcome %q: use held or one of %v", o, driver.AllOutcomes()), http.StatusBadRequest)
		return
	}
	ents, err := c.store.Fleet().EntityPage(ctx, t.Name, pq)
	if errors.Is(err, driver.ErrBadCursor) {
		http.Error(w, "bad cursor: follow the page's own next link", http.StatusBadRequest)
		return
	}
	if err != nil {
		c.fail(w, err)
		return
	}
	data := struct {
		Page
		Task     taskRow
		Chart    chart
		Query    driver.PageQuery
		Entities driver.Page
		NextURL  string
		Pending  []driver.Due
		// Backfills are the task's backfills kept, the newest first.
		Backfills []report.BackfillDoc
		Failures  []driver.Failure
		Actions   []driver.Action
		Outcomes  []string // what the outcome filter offers
		// Shards is the shard count recorded in Redis, in force;
		// ConfigShards the config's.
		Shards, ConfigShards int
		// Monitor is the site the task's heartbeat pings ("": none);
		// Traces the one its ticks' traces go to ("": not traced).
		Monitor, Traces string
	}{Page: c.page(r, t.Name), Task: row, Chart: chartOf(row.Ticks).withAxis(t.Location), Query: pq, Entities: ents, Actions: row.Actions}
	if t.HeartbeatURL != "" {
		data.Monitor = siteOf(t.HeartbeatURL)
	}
	data.Traces = c.tracesWhere()
	data.Outcomes = append(data.Outcomes, "held")
	for _, o := range driver.AllOutcomes() {
		data.Outcomes = append(data.Outcomes, string(o))
	}
	// A page comes in the store's scan order: shown by id.
	slices.SortFunc(data.Entities.Rows, func(a, b driver.EntityRow) int { return strings.Compare(a.Entity, b.Entity) })
	if ents.Next != "" {
		nq := url.Values{"cursor": {ents.Next}, "q": {pq.Search}, "mode": {q.Get("mode")}, "outcome": {pq.Outcome}}
		data.NextURL = c.url("/tasks/") + url.PathEscape(t.Name) + "?" + nq.Encode()
	}
	counts, err := c.store.Fleet().RecordedShards(ctx, []string{t.Name})
	if err != nil {
		c.fail(w, err)
		return
	}
	bfs, err := report.ReadBackfills(ctx, c.store, t.Name)
	if err != nil {
		c.fail(w, err)
		return
	}
	for _, b := range bfs {
		data.Backfills = append(data.Backfills, report.BackfillDocOf(b, time.Now()))
	}
	data.ConfigShards = max(t.Shards, 1)
	data.Shards = cmp.Or(counts[t.Name], data.ConfigShards) // none recorded yet: the first tick records the config's
	errFull := errors.New("full")
	err = c.store.Fleet().DueEntries(ctx, t.Name, func(d driver.Due) error {
		if data.Pending = append(data.Pending, d); len(data.Pending) >= pendingRows {
			return errFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		c.fail(w, err)
		return
	}
	if data.Failures, err = c.store.Fleet().Failures(ctx, t.Name, recentFails); err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "task.html", data)
}

func (c *Console) entityPage(w http.ResponseWriter, r *http.Request) {
	t, ok := c.task(w, r)
	if !ok {
		return
	}
	id := r.URL.Query().Get("id")
	ctx := r.Context()
	es, err := report.ReadEntity(ctx, c.store, t, id, c.lookups.find(ctx, t, id), time.Now())
	if err != nil {
		c.fail(w, err)
		return
	}
	fs, err := c.store.Fleet().Failures(ctx, t.Name, driver.DefaultHistory().Failures)
	if err != nil {
		c.fail(w, err)
		return
	}
	fs = slices.DeleteFunc(fs, func(f driver.Failure) bool { return f.Entity != id })
	c.render(w, "entity.html", struct {
		Page
		Task     *config.Task
		ID       string
		State    driver.EntityState
		Entity   report.EntityStatus
		Source   string
		Failures []driver.Failure
	}{c.page(r, t.Name+" / "+report.Visible(id)), t, id, es.State, es, report.DescribeSource(*t), fs})
}

func (c *Console) requestPage(w http.ResponseWriter, r *http.Request) {
	t, ok := c.task(w, r)
	if !ok {
		return
	}
	ids := r.URL.Query()["e"]
	answers, err := c.store.Answers(r.Context(), t.Name, r.PathValue("id"))
	if err != nil {
		c.fail(w, err)
		return
	}
	type answer struct{ Entity, Outcome string }
	var as []answer
	for _, id := range ids {
		a := answer{Entity: id, Outcome: "pending"}
		if o, ok := answers[id]; ok {
			a.Outcome = string(o)
		}
		as = append(as, a)
	}
	pg := c.page(r, t.Name+": trigger")
	var pending []string
	for _, a := range as {
		if a.Outcome == "pending" {
			pending = append(pending, a.Entity)
		}
	}
	busy := map[string]string{}
	for _, b := range ops.BusyOf(r.Context(), c.store, t.Name, pending) {
		busy[b.Entity] = b.Said()
	}
	for i, a := range as {
		if said, ok := busy[a.Entity]; ok && a.Outcome == "pending" {
			as[i].Outcome = "pending: " + said
		}
	}
	if len(pending) == 0 {
		pg.Refresh = 0 // every answer is in: nothing more will change
	}
	c.render(w, "request.html", struct {
		Page
		Task    *config.Task
		Answers []answer
		Waiting int
	}{pg, t, as, len(pending)})
}

func (c *Console) replicasPage(w http.ResponseWriter, r *http.Request) {
	rs, err := c.store.Fleet().Replicas(r.Context())
	if err != nil {
		c.fail(w, err)
		return
	}
	var locks []driver.Held
	errFull := errors.New("full")
	err = c.store.Fleet().Leases(r.Context(), report.LockTask, func(h driver.Held) error {
		if locks = append(locks, h); len(locks) >= pendingRows {
			return errFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFull) {
		c.fail(w, err)
		return
	}
	c.render(w, "replicas.html", struct {
		Page
		Replicas []driver.Replica
		Locks    []driver.Held
	}{c.page(r, "Replicas"), rs, locks})
}

// failuresPage shows the newest failed runs of every task, newest first:
// one list, which every failure is also written to.
func (c *Console) failuresPage(w http.ResponseWriter, r *http.Request) {
	fs, err := c.store.Fleet().Failures(r.Context(), "", driver.DefaultHistory().Failures)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "failures.html", struct {
		Page
		Failures []driver.Failure
	}{c.page(r, "Failures"), fs})
}

// actionsPage shows every operator action, newest first: one list, which
// every action is also written to.
func (c *Console) actionsPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	all, err := c.store.Fleet().Actions(ctx, "", driver.DefaultHistory().Actions)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "actions.html", struct {
		Page
		Actions []driver.Action
	}{c.page(r, "Actions"), all})
}
