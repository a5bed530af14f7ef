// Package expect checks values in tests one named condition at a time, so a
// failure says which condition broke (not "got this struct").
package expect

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// failed keeps, per test, the messages it failed on here.
var failed sync.Map // testing.TB -> *failures

type failures struct {
	mu   sync.Mutex
	msgs []string
}

// fail reports msg without stopping the test and keeps it for Failures.
func fail(t testing.TB, msg string) {
	t.Helper()
	keep(t, msg)
	t.Error(msg)
}

func keep(t testing.TB, msg string) {
	v, _ := failed.LoadOrStore(t, &failures{})
	f := v.(*failures)
	f.mu.Lock()
	f.msgs = append(f.msgs, msg)
	f.mu.Unlock()
}

// Failures is what t has failed on so far through this package, in order:
// a helper that prints long logs at a failing test's end repeats them after
// the logs, where an excerpt of the output's tail still shows them.
func Failures(t testing.TB) []string {
	v, ok := failed.Load(t)
	if !ok {
		return nil
	}
	f := v.(*failures)
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.msgs...)
}

// Equal reports, without stopping the test, that what is got and not want.
// It returns whether they were equal.
func Equal[T comparable](t testing.TB, what string, got, want T) bool {
	t.Helper()
	if got != want {
		fail(t, fmt.Sprintf("%s: got %v, want %v", what, got, want))
		return false
	}
	return true
}

// Same is Equal for values == cannot compare (slices, maps, structs that
// hold them): reflect.DeepEqual's equality.
func Same[T any](t testing.TB, what string, got, want T) bool {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		fail(t, fmt.Sprintf("%s: got %+v, want %+v", what, got, want))
		return false
	}
	return true
}

// True reports, without stopping the test, that cond (named what) is false.
func True(t testing.TB, what string, cond bool) bool {
	t.Helper()
	if !cond {
		fail(t, "not so: "+what)
	}
	return cond
}

// NotNil stops the test when p, named what, is nil: the checks of its
// fields that follow would only panic.
func NotNil[T any](t testing.TB, what string, p *T) {
	t.Helper()
	if p == nil {
		Fatalf(t, "%s: nil", what)
	}
}

// OnFatal is told, when set (before the tests run), each message Fatalf
// and WaitFor stop a test with: a suite that sums its failures up at its
// end (the fault suite's table) keeps them there, where the logs that a
// failing test prints after its message do not push them out of sight.
var OnFatal func(t testing.TB, msg string)

// Fatalf stops the test with the message, told to OnFatal first.
func Fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if OnFatal != nil {
		OnFatal(t, msg)
	}
	keep(t, msg)
	t.Fatal(msg)
}

// WaitFor polls cond every few milliseconds until it is true or d passes, and
// fails the test with msg when the deadline passes: the way every test here
// waits for a condition, instead of sleeping.
func WaitFor(t testing.TB, d time.Duration, msg string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		Fatalf(t, "timed out after %v waiting for %s", d, msg)
	}
}

// Within is WaitFor that does not fail: it says whether cond held within
// d, for a test that then says in detail what was missing.
func Within(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
