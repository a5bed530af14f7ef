package console

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/tickd/tickd/internal/report"
)

// statusJSON serves the status document (tickd status -json), of one task
// with ?task=.
func (c *Console) statusJSON(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	only, cfg := r.URL.Query().Get("task"), c.cfg()
	if only != "" {
		if _, ok := cfg.Task(only); !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no task " + only + " in the config"})
			return
		}
	}
	// Bounded as tickd status is without -all: at most StatusScan entities
	// a task (a viewer cannot ask for the whole walk).
	st, err := report.ReadStatus(ctx, c.store, cfg, only, 20, report.StatusScan, "", time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st.Doc())
}

// historyJSON serves a task's history document (tickd history -json).
func (c *Console) historyJSON(w http.ResponseWriter, r *http.Request) {
	t, ok := c.cfg().Task(r.PathValue("task"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no task " + r.PathValue("task") + " in the config"})
		return
	}
	h, err := report.ReadHistory(r.Context(), c.store, t, 20, time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, h.Doc())
}

// writeJSON writes doc as the -json commands do, with status code.
func writeJSON(w http.ResponseWriter, code int, doc any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(doc) //nolint:errcheck // the client went away
}

// entityJSON serves one entity's document (tickd status -json TASK
// ENTITY), of ?id=; its attributes read as the entity page reads them.
func (c *Console) entityJSON(w http.ResponseWriter, r *http.Request) {
	t, ok := c.cfg().Task(r.PathValue("task"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no task " + r.PathValue("task") + " in the config"})
		return
	}
	ctx, id, now := r.Context(), r.URL.Query().Get("id"), time.Now()
	es, err := report.ReadEntity(ctx, c.store, t, id, c.lookups.find(ctx, t, id), now)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, es.Doc(now))
}
