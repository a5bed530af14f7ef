// Package expect checks values in tests one named condition at a time, so a
// failure says which condition broke (not "got this struct").
package expect

import "testing"

// Equal reports, without stopping the test, that what is got and not want.
// It returns whether they were equal.
func Equal[T comparable](t testing.TB, what string, got, want T) bool {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
		return false
	}
	return true
}

// True reports, without stopping the test, that cond (named what) is false.
func True(t testing.TB, what string, cond bool) bool {
	t.Helper()
	if !cond {
		t.Errorf("not so: %s", what)
	}
	return cond
}

// NotNil stops the test when p, named what, is nil: the checks of its
// fields that follow would only panic.
func NotNil[T any](t testing.TB, what string, p *T) {
	t.Helper()
	if p == nil {
		t.Fatalf("%s: nil", what)
	}
}
