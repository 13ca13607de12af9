package bfd

import (
	"log/slog"
	"sync"
)

// maxQueuedEvents bounds the events kept for a reader that does not
// read; a reader that falls this far behind resynchronises from
// Sessions anyway.
const maxQueuedEvents = 1024

// eventQueue hands events to a channel in order without ever blocking
// the sessions that push them.
type eventQueue struct {
	log    *slog.Logger
	out    chan Event
	notify chan struct{}
	done   chan struct{}
	ended  chan struct{}

	mu      sync.Mutex
	pending []queued
	seq     uint64
	lost    uint64
}

type queued struct {
	seq uint64
	ev  Event
}

func newEventQueue(log *slog.Logger) *eventQueue {
	q := &eventQueue{
		log:    log,
		out:    make(chan Event),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		ended:  make(chan struct{}),
	}
	go q.run()
	return q
}

func (q *eventQueue) push(ev Event) {
	q.mu.Lock()
	if len(q.pending) >= maxQueuedEvents {
		q.pending = q.pending[1:]
		q.lost++
		if q.lost == 1 || q.lost%maxQueuedEvents == 0 {
			q.log.Error("BFD events dropped: nobody reads Manager.Events", "dropped", q.lost,
				"fix", "a bug in the program that runs BFD: report it; sessions keep running, only their state changes go unreported")
		}
	}
	q.seq++
	q.pending = append(q.pending, queued{seq: q.seq, ev: ev})
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *eventQueue) run() {
	defer close(q.ended)
	defer close(q.out)
	for {
		q.mu.Lock()
		var next queued
		have := len(q.pending) > 0
		if have {
			next = q.pending[0]
		}
		q.mu.Unlock()
		if !have {
			select {
			case <-q.notify:
				continue
			case <-q.done:
				return
			}
		}
		select {
		case q.out <- next.ev:
			q.mu.Lock()
			// push may have dropped it meanwhile to make room.
			if len(q.pending) > 0 && q.pending[0].seq == next.seq {
				q.pending = q.pending[1:]
			}
			q.mu.Unlock()
		case <-q.notify:
		case <-q.done:
			return
		}
	}
}

// close ends the queue and closes the channel; queued events are lost.
func (q *eventQueue) close() {
	close(q.done)
	<-q.ended
}
