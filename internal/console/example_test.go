package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/console"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/stores"
)

// The console mounted in a Go program's own mux, under /tickd, behind the
// program's own sign-on: whoever it lets through is told to the console
// with WithUser (here every request is an admin's).
func ExampleNew() {
	t := config.DefaultTask()
	t.Name, t.Every, t.Handler = "sync-users", 15*time.Minute, "sync-user"
	t.Entities = []string{"1", "2"}
	cfg, err := config.New(config.DefaultDaemon(), nil, t)
	if err != nil {
		panic(err)
	}
	store := stores.Memory(lease.Options{Replica: "example"})
	defer store.Stop(context.Background())
	c, err := console.New(console.Options{Config: cfg, Store: store, Prefix: "/tickd"})
	if err != nil {
		panic(err)
	}
	signOn := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u := console.User{Name: "ops@example.com", Role: console.Admin}
			next.ServeHTTP(w, r.WithContext(console.WithUser(r.Context(), u)))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/tickd/", signOn(c)) // the full path: no http.StripPrefix
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/tickd/", "/tickd/tasks/sync-users", "/tickd/api/status", "/tickd/tasks/nope"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// Output:
	// /tickd/ 200 text/html; charset=utf-8
	// /tickd/tasks/sync-users 200 text/html; charset=utf-8
	// /tickd/api/status 200 application/json
	// /tickd/tasks/nope 404 text/plain; charset=utf-8
}
