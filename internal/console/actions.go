package console

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/report"
)

// The actions: POST only, admins only (Console.admin), behind
// http.CrossOriginProtection; each leaves the same record as the command
// that does it, with the console's user as who.

// maxWatched bounds the entities a trigger's answers page follows.
const maxWatched = 100

// trigger enqueues a run of the entities given (one a line), or of every
// entity with all=1, each answering one request id, and sends the browser
// to the page that watches the answers arrive.
func (c *Console) trigger(w http.ResponseWriter, r *http.Request) {
	t, ok := c.task(w, r)
	if !ok {
		return
	}
	var given []string
	if r.PostFormValue("all") != "1" {
		// entity_hex: exact ids, whatever they hold (newlines too: the
		// entity page's button); entity: exact ids from a script;
		// entities: the textarea's, one a line.
		hexed, err := entityIDs(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		given = append(append(given, hexed...), r.PostForm["entity"]...)
		for line := range strings.SplitSeq(r.PostFormValue("entities"), "\n") {
			if id := strings.TrimRight(line, "\r"); strings.TrimSpace(id) != "" {
				given = append(given, id)
			}
		}
		if len(given) == 0 {
			http.Error(w, "name an entity (one a line), or trigger all", http.StatusBadRequest)
			return
		}
	}
	ctx := r.Context()
	ids, err := ops.TriggerIDs(ctx, *t, given, r.PostFormValue("force") == "1")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := lease.NewRequestID()
	d, err := ops.Trigger(ctx, c.store, t, ids, []string{req}, by(r))
	if err != nil {
		c.fail(w, err)
		return
	}
	c.logAction(d.Done)
	q := url.Values{}
	for _, id := range ids[:min(len(ids), maxWatched)] {
		q.Add("e", id)
	}
	http.Redirect(w, r, c.url("/tasks/")+url.PathEscape(t.Name)+"/requests/"+req+"?"+q.Encode(), http.StatusSeeOther)
}

// pause pauses the task with a reason and, if given, an end (for, a Go
// duration such as 2h).
func (c *Console) pause(w http.ResponseWriter, r *http.Request) {
	t, ok := c.task(w, r)
	if !ok {
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		http.Error(w, "give a reason for the pause (it is shown to everyone and kept in the history)", http.StatusBadRequest)
		return
	}
	var forD time.Duration
	if f := strings.TrimSpace(r.PostFormValue("for")); f != "" {
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			http.Error(w, fmt.Sprintf("for %q: give a duration such as 30m or 2h", f), http.StatusBadRequest)
			return
		}
		forD = d
	}
	res, err := ops.Pause(r.Context(), c.store, t, by(r), reason, forD, time.Now())
	c.paused(w, r, t, res, err)
}

func (c *Console) resume(w http.ResponseWriter, r *http.Request) {
	t, ok := c.task(w, r)
	if !ok {
		return
	}
	res, err := ops.Resume(r.Context(), c.store, t, by(r), strings.TrimSpace(r.PostFormValue("reason")), time.Now())
	c.paused(w, r, t, res, err)
}

// paused answers a pause or a resume: what changed, on the task's page.
func (c *Console) paused(w http.ResponseWriter, r *http.Request, t *config.Task, res ops.Paused, err error) {
	switch {
	case errors.Is(err, ops.ErrReason):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		c.fail(w, err)
		return
	}
	if res.Changed {
		c.logAction(res.Done)
	}
	c.back(w, r, c.url("/tasks/")+url.PathEscape(t.Name), res.Said)
}

// unlock revokes an entity's lease once the entity id is typed again
// (confirm), as a guard against a slip: its holder stops, then the entity
// is free (lease.Store.Unlock). With force=1 it frees it at once.
func (c *Console) unlock(w http.ResponseWriter, r *http.Request) {
	t, ok := c.task(w, r)
	if !ok {
		return
	}
	id := r.PostFormValue("entity")
	if ids, err := entityIDs(r); err != nil || len(ids) > 1 {
		http.Error(w, "bad entity_hex", http.StatusBadRequest)
		return
	} else if len(ids) == 1 {
		id = ids[0]
	}
	// What the browser typed in confirm came back with CRLF line ends.
	if confirm := strings.ReplaceAll(r.PostFormValue("confirm"), "\r\n", "\n"); id == "" || confirm != id && confirm != report.Visible(id) {
		http.Error(w, "type the entity id again (as the page shows it) to unlock it", http.StatusBadRequest)
		return
	}
	u, err := ops.Unlock(r.Context(), c.store, t, id, by(r), r.PostFormValue("force") == "1")
	switch {
	case errors.Is(err, ops.ErrNotHeld):
		http.Error(w, "no lease is held on that entity", http.StatusConflict)
		return
	case err != nil:
		c.fail(w, err)
		return
	}
	if !u.Already {
		c.logAction(u.Done)
	}
	c.back(w, r, c.url("/tasks/")+url.PathEscape(t.Name)+"/entity?id="+url.QueryEscape(id), u.Said)
}

// entityIDs are the form's entity_hex ids, decoded: a browser submits a
// newline in a field's value as CRLF, so the entity page carries its exact
// id hex-encoded (an id "nl\nx" came back as "nl\r\nx").
func entityIDs(r *http.Request) ([]string, error) {
	var ids []string
	for _, h := range r.PostForm["entity_hex"] {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("entity_hex %q: not hex", h)
		}
		ids = append(ids, string(b))
	}
	return ids, nil
}

// logAction logs an action done from the console, and that its record
// could not be written, if so (the action is done all the same).
func (c *Console) logAction(d ops.Done) {
	a := d.Action
	if d.Recorded != nil {
		c.log.Warn("console action not recorded in the history", "action", a.What, "task", a.Task, "error", d.Recorded)
	}
	c.log.Info("console action", "action", a.What, "task", a.Task, "by", a.By, "entities", len(a.Entities), "reason", a.Reason)
}

// back sends the browser to path after an action, saying what was done.
func (c *Console) back(w http.ResponseWriter, r *http.Request, path, done string) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	id := c.flashes.put(userOf(r).Name, done)
	http.Redirect(w, r, path+sep+"done="+id, http.StatusSeeOther)
}
