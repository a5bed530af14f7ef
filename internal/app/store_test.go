package app

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
)

// TestOpenStoreFromConfig: OpenStore opens the Redis the [redis]
// table names (leases there, seen by any other store on that prefix), and
// the in-process store without one.
func TestOpenStoreFromConfig(t *testing.T) {
	srv := redistest.Start(t)
	cfg := parse(t, fmt.Sprintf("[redis]\nurl = %q\nkey_prefix = \"emb\"\n[[tasks]]\nname = \"t\"\nevery = \"1h\"\nhandler = \"rec\"\nlease_ttl = \"2s\"\n", srv.URL()))
	st, err := OpenStore(cfg, lease.Options{Replica: "emb-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop(context.Background()) //nolint:errcheck
	if st.MaxTTL() != 2*time.Second {
		t.Errorf("MaxTTL %v, want the config's lease_ttl", st.MaxTTL())
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	other, err := stores.Redis(c, "emb", lease.Options{Replica: "other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Stop(context.Background()); c.Close() })
	other.InitEpoch(context.Background()) //nolint:errcheck
	l, err := st.Acquire(context.Background(), driver.Request{Task: "t", Entity: "x", TTL: 2 * time.Second, Reason: driver.ReasonTrigger})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background(), driver.Finished{Outcome: driver.OutcomeDone}, nil) //nolint:errcheck
	var be *lease.BusyError
	if _, err := other.Acquire(context.Background(), driver.Request{Task: "t", Entity: "x", TTL: 2 * time.Second, Reason: driver.ReasonTrigger}); !errors.As(err, &be) || be.Holder != "emb-1" {
		t.Fatalf("another store on the config's Redis and prefix: %v, want busy, held by emb-1", err)
	}
	mem, err := OpenStore(parse(t, "[[tasks]]\nname = \"t\"\nevery = \"1h\"\nhandler = \"rec\"\n"), lease.Options{})
	if err != nil || mem == nil {
		t.Fatalf("without [redis]: %v", err)
	}
	mem.Stop(context.Background()) //nolint:errcheck
}
