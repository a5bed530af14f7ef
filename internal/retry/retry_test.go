package retry

import (
	"testing"
	"time"
)

// TestBackoffDoublesToItsCeilingAndStartsAgain: 100ms, 200ms, 400ms, then
// the ceiling; after a Reset, the first wait again.
func TestBackoffDoublesToItsCeilingAndStartsAgain(t *testing.T) {
	b := Backoff{First: 100 * time.Millisecond, Max: 500 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100, 200, 400, 500, 500}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after Reset: %v, want the first wait", d)
	}
}

// TestWaitEndsWithTheStop: a wait on a closed channel returns at once,
// saying it did not pass.
func TestWaitEndsWithTheStop(t *testing.T) {
	done := make(chan struct{})
	close(done)
	if Wait(done, time.Hour) {
		t.Fatal("a wait of an hour on a closed channel said it passed")
	}
	if !Wait(nil, time.Millisecond) {
		t.Fatal("a wait of 1ms with no stop did not pass")
	}
}

// TestAttemptDoublesWithJitter: retry n waits 2^(n-1)s ±20%, capped at 5m.
func TestAttemptDoublesWithJitter(t *testing.T) {
	for n, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 10: 5 * time.Minute, 50: 5 * time.Minute} {
		for range 20 {
			if d := Attempt(n); d < base*8/10 || d > base*12/10 {
				t.Fatalf("retry %d waits %v, want %v ±20%%", n, d, base)
			}
		}
	}
}
