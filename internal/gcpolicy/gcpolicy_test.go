package gcpolicy

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, Floor},
		{Floor / 2, Floor},
		{Floor, 2 * Floor},
		{math.MaxUint64, math.MaxInt64},
	} {
		if got := Limit(c.live); got != c.want {
			t.Errorf("Limit(%d) = %d, want %d", c.live, got, c.want)
		}
	}
}

// settings reads GOGC and the soft memory limit without changing them.
func settings() (int, int64) {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p, debug.SetMemoryLimit(-1)
}

// apply starts a Policy and returns its Stop.
func apply(t *testing.T) (restore func()) {
	var p Policy
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return func() { p.Stop(context.Background()) } //nolint:errcheck // nil
}

func TestPolicySetsItAndRestores(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	percent, limit := settings()
	restore := apply(t)
	p, l := settings()
	restore()
	if p != Percent || l < Floor || l == math.MaxInt64 {
		t.Errorf("under Apply: GOGC %d, memory limit %d; want %d and at least %d", p, l, Percent, Floor)
	}
	if p, l := settings(); p != percent || l != limit {
		t.Errorf("after restore: GOGC %d, memory limit %d; want %d and %d", p, l, percent, limit)
	}
}

// The limit follows the live heap: twice a live heap of twice Floor.
func TestLimitFollowsTheLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	defer apply(t)()
	live := make([]byte, 2*Floor)
	runtime.GC()
	update()
	if _, l := settings(); l < 4*Floor {
		t.Errorf("memory limit %d with a live heap over %d: want at least %d", l, len(live), 4*Floor)
	}
	runtime.KeepAlive(live)
}

func TestTheEnvironmentWins(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv("GOGC", "")
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv(env, "200")
			percent, limit := settings()
			restore := apply(t)
			p, l := settings()
			restore()
			if p != percent || l != limit {
				t.Errorf("with %s set: GOGC %d, memory limit %d; want them unchanged (%d, %d)", env, p, l, percent, limit)
			}
		})
	}
}
