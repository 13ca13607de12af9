package health

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"
)

// schedule is Run's loop: it sleeps until the earliest due probe (or
// until Set or a finishing probe changes what is earliest) and starts
// every due probe the in-flight limit allows. Nothing else wakes it, so
// idle time costs nothing however many targets there are.
func (p *Prober) schedule(ctx context.Context, wg *sync.WaitGroup) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if wait := p.startDue(ctx, wg); wait > 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-timer.C:
		}
	}
}

// startDue starts the due probes the limit allows and returns the time
// until the next one is due; 0 means none is, or the limit is reached,
// and a poke will come when that changes.
func (p *Prober) startDue(ctx context.Context, wg *sync.WaitGroup) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for len(p.queue) > 0 && p.inflight < p.limit && ctx.Err() == nil {
		e := p.queue[0]
		if wait := e.due.Sub(now); wait > 0 {
			return wait
		}
		p.queue.remove(e)
		p.inflight++
		if n := len(p.idle); n > 0 {
			w := p.idle[n-1]
			p.idle = p.idle[:n-1]
			w.pos = -1
			w.jobs <- e // buffered, and empty while the worker is idle
		} else {
			w := &worker{jobs: make(chan *entry, 1), pos: -1}
			p.workers++
			wg.Add(1)
			go p.work(ctx, wg, w, e)
		}
	}
	return 0
}

// workerIdle is how long a probe worker waits for work before it ends.
// Reusing workers saves a goroutine start and its stack growth per probe,
// about a tenth of the prober's CPU.
const workerIdle = 2 * time.Second

// worker is a probe worker goroutine's mailbox.
type worker struct {
	jobs chan *entry // the next target to probe; capacity 1
	pos  int         // index in Prober.idle; -1 while busy
}

// work probes e, then whatever the scheduler hands w, until w has been
// idle for workerIdle or Run ends.
//
// Every worker is either running a probe counted in inflight or in the
// idle stack: finish moves it from one to the other under mu, and the
// scheduler hands a job to the worker idle the shortest time, also under
// mu. The scheduler starts a worker only when none is idle, so workers
// never outnumber the in-flight limit (after Set lowers it, the extra
// workers end once idle), and taking the most recently idle one first
// lets the pool shrink to what the load needs after a burst.
func (p *Prober) work(ctx context.Context, wg *sync.WaitGroup, w *worker, e *entry) {
	defer wg.Done()
	timer := time.NewTimer(workerIdle)
	defer timer.Stop()
	for {
		start := time.Now()
		latency, err := run(ctx, e.spec)
		p.finish(ctx, w, e, start, latency, err)
		timer.Reset(workerIdle)
		select {
		case e = <-w.jobs:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		p.mu.Lock()
		if w.pos >= 0 {
			p.idle = slices.Delete(p.idle, w.pos, w.pos+1)
			for i := w.pos; i < len(p.idle); i++ {
				p.idle[i].pos = i
			}
			p.workers--
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		e = <-w.jobs // handed one just before it gave up waiting
	}
}

// finish records a probe's result, queues e's next probe, and puts w on
// the idle stack. A result
// for a target that Set has since removed or changed is dropped, and so
// is one cut short by the end of Run.
func (p *Prober) finish(ctx context.Context, w *worker, e *entry, start time.Time, latency time.Duration, err error) {
	now := time.Now()
	p.mu.Lock()
	full := p.inflight >= p.limit
	p.inflight--
	w.pos = len(p.idle) // w waits for a job next
	p.idle = append(p.idle, w)
	if p.targets[e.key] != e {
		p.mu.Unlock()
		if full {
			p.poke()
		}
		return
	}
	if ctx.Err() != nil {
		p.queue.push(e) // still due: the next Run probes it first
		p.mu.Unlock()
		return
	}

	errText := ""
	if err != nil {
		errText = err.Error()
	}
	prev := e.res.record(e.spec.check, err == nil, errText, latency, now)
	res := e.res
	if (Result{State: prev}).Healthy() != res.Healthy() {
		p.signal()
		if res.Healthy() {
			p.down--
		} else {
			p.down++
		}
	}
	if p.observe != nil {
		p.observe(e.key, res)
	}
	// Keep at least half an interval between two starts, so that a first
	// probe made at once is not followed by another a moment later.
	e.due = p.nextSlot(e, later(now, start.Add(e.spec.check.Interval/2)))
	p.queue.push(e)
	first := e.index == 0
	p.mu.Unlock()

	if full || first {
		p.poke()
	}
	if prev != res.State {
		p.logChange(e, prev, res)
	}
}

// logChange records a state change at debug level: the agent, which knows
// the service and what the change does to it, logs it for the operator.
func (p *Prober) logChange(e *entry, prev State, r Result) {
	p.log.Debug("health state changed", "key", e.key, "addr", e.addr, "check", e.spec.check.Type,
		"from", string(prev), "to", string(r.State), "error", r.LastError,
		"failures", r.Failures, "successes", r.Successes)
}

// nextSlot returns e's first probe slot after t. A target's slots are
// epoch + phase + k·Interval: fixed per key, so a thousand targets stay
// spread over the interval instead of drifting into step.
func (p *Prober) nextSlot(e *entry, t time.Time) time.Time {
	iv := e.spec.check.Interval
	d := t.Sub(p.epoch) - e.phase
	if d < 0 {
		return p.epoch.Add(e.phase)
	}
	return p.epoch.Add(e.phase + (d/iv+1)*iv)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// queue is a min-heap of the entries waiting for their next probe, by
// due time. Each entry knows its index, so Set can take out any of them.
type queue []*entry

func (q *queue) push(e *entry) { heap.Push(q, e) }

func (q *queue) remove(e *entry) { heap.Remove(q, e.index) }

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }

func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}

// Push and Pop are for container/heap; use push and remove.
func (q *queue) Push(x any) {
	e := x.(*entry)
	e.index = len(*q)
	*q = append(*q, e)
}

func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.index = -1
	return e
}
