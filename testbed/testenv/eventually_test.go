package testenv

import (
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(5*time.Second, func() bool { n++; return n == 3 }) {
		t.Fatal("Poll gave up on a condition that held at the third call")
	}
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	start := time.Now()
	if Poll(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("Poll gave up before its timeout")
	}
}
