package bfd

import (
	"log/slog"
	"testing"
	"time"
)

func TestEventQueueKeepsOrderAndDropsOldest(t *testing.T) {
	q := newEventQueue(slog.New(slog.DiscardHandler))
	const extra = 10
	for i := range maxQueuedEvents + extra {
		q.push(Event{Time: epoch.Add(time.Duration(i))}) // push never blocks
	}
	for i := extra; i < maxQueuedEvents+extra; i++ {
		select {
		case ev := <-q.out:
			if got := ev.Time.Sub(epoch); got != time.Duration(i) {
				t.Fatalf("event %d: got number %d (oldest %d should have been dropped)", i, got, extra)
			}
		case <-time.After(time.Second):
			t.Fatalf("event %d not delivered", i)
		}
	}
	select {
	case ev := <-q.out:
		t.Fatalf("extra event %+v", ev)
	case <-time.After(10 * time.Millisecond):
	}
	q.close()
	if _, ok := <-q.out; ok {
		t.Fatal("channel open after close")
	}
}
