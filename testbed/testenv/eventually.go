package testenv

import (
	"testing"
	"time"
)

// Poll calls cond until it returns true or timeout has passed, and
// returns its last answer. It polls often at first and less often later
// (2 ms doubling up to 100 ms), so a condition that holds soon ends the
// wait soon and a slow one does not spin.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	pause := 2 * time.Millisecond
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// Eventually waits, as Poll, until cond reports true, and otherwise
// fails the test with what and the last state cond described.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	var last string
	if !Poll(timeout, func() bool {
		ok, state := cond()
		last = state
		return ok
	}) {
		t.Fatalf("%s: not within %v; last: %s", what, timeout, last)
	}
}

// EventuallyTrue is Eventually for a condition without a state to report.
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, string) { return cond(), "false" })
}
