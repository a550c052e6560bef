// Package retryq retries the reconciles a store failed to apply, for both
// the middleware (the root package) and upstream.Transport: each job is
// tried again on a backoff of its own until it is applied or its time runs
// out, at most Parallel tries at once, and is dropped at its own deadline
// (or, when a try is in flight then, as soon as that try fails): never
// later than For plus one try after its first failure, however many jobs
// wait and however slowly the store fails. What waits is bounded in jobs
// and in bytes, whatever the store does.
package retryq

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// Config is what a Queue does with its jobs. Every field but Size and
// MaxBytes is required.
type Config[J any] struct {
	// For is how long a job is retried, from its first failure.
	For time.Duration
	// First is the wait before a job's first retry; each later wait doubles,
	// up to Max (First == Max: a constant interval).
	First, Max time.Duration
	// Bound is the most jobs held at once.
	Bound int
	// MaxBytes, when positive, bounds the sum of Size over the jobs held.
	MaxBytes int64
	Size     func(*J) int64
	// Parallel is the most tries in flight at once.
	Parallel int
	// Try makes one attempt; nil: applied. Each runs on a goroutine of its
	// own and must return (a store call bounded by a timeout).
	Try func(*J) error
	// Done reports a job applied (err nil) or dropped: err is its latest
	// failure. It runs once per job, outside the queue's lock, and never
	// for a job Close returns. A panic in it (an observer's) is recovered:
	// the queue goes on.
	Done func(j *J, err error)
}

// Why Add refuses a job.
var (
	ErrClosed = errors.New("closed")
	ErrFull   = errors.New("too many waiting")
)

type item[J any] struct {
	job   J
	err   error         // the latest failure
	size  int64         // Size(job), counted in Queue.bytes
	until time.Time     // dropped when a try at or after it fails, or when it is due with no try free
	next  time.Time     // when it is due, never after until
	delay time.Duration // the latest wait
	at    [2]int        // its index in Queue.byNext and Queue.byUntil
}

// Queue holds failed jobs and retries them. Its goroutine runs only while
// jobs wait.
type Queue[J any] struct {
	cfg Config[J]

	mu       sync.Mutex
	byNext   jobHeap[J] // the jobs waiting, by when they are due
	byUntil  jobHeap[J] // the same jobs, by deadline
	inFlight int
	bytes    int64
	closed   bool          // no job is added any more
	stopped  bool          // Close gave up: no try is started any more
	wake     chan struct{} // signals the goroutine: a job came, a try ended, or stop
	done     chan struct{} // closed when the goroutine ends; nil when none runs
	tries    sync.WaitGroup
	idle     chan struct{} // closed when nothing waits or is in flight; nil when nobody asks
}

// New returns a Queue doing what cfg says.
func New[J any](cfg Config[J]) *Queue[J] {
	return &Queue[J]{cfg: cfg, wake: make(chan struct{}, 1), byNext: jobHeap[J]{which: 0}, byUntil: jobHeap[J]{which: 1}}
}

// Add holds j, which just failed with err, for retrying; it returns
// ErrClosed or ErrFull (and holds nothing) when the job must be dropped at
// once.
func (q *Queue[J]) Add(j J, err error) error {
	it := &item[J]{job: j, err: err}
	if q.cfg.Size != nil {
		it.size = q.cfg.Size(&it.job)
	}
	now := time.Now()
	it.until = now.Add(q.cfg.For)
	it.delay = q.cfg.First
	it.next = minTime(now.Add(it.delay), it.until)
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return ErrClosed
	case len(q.byNext.items)+q.inFlight >= q.cfg.Bound,
		q.cfg.MaxBytes > 0 && q.bytes+it.size > q.cfg.MaxBytes:
		return ErrFull
	}
	q.bytes += it.size
	q.hold(it)
	if q.done == nil {
		q.done = make(chan struct{})
		go q.run(q.done)
	} else {
		q.signal()
	}
	return nil
}

// Len returns how many jobs are held (waiting or being tried).
func (q *Queue[J]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byNext.items) + q.inFlight
}

// hold puts it among the waiting jobs; q.mu is held.
func (q *Queue[J]) hold(it *item[J]) {
	heap.Push(&q.byNext, it)
	heap.Push(&q.byUntil, it)
}

// unhold takes it from the waiting jobs; q.mu is held.
func (q *Queue[J]) unhold(it *item[J]) {
	heap.Remove(&q.byNext, it.at[0])
	heap.Remove(&q.byUntil, it.at[1])
}

func (q *Queue[J]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run starts the tries that are due, drops the jobs past their deadline
// that no try can take, and sleeps until the next is due.
func (q *Queue[J]) run(done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var drop []*item[J]
	for {
		now := time.Now()
		q.mu.Lock()
		if q.stopped || len(q.byNext.items) == 0 && q.inFlight == 0 {
			q.done = nil
			q.mu.Unlock()
			return
		}
		// Due jobs are tried while tries are free, the earliest due first.
		for q.inFlight < q.cfg.Parallel && len(q.byNext.items) > 0 && !q.byNext.items[0].next.After(now) {
			it := q.byNext.items[0]
			q.unhold(it)
			q.inFlight++
			q.tries.Add(1)
			go q.try(it)
		}
		// A job at its deadline that no try took is dropped. (A job is due
		// by its deadline at the latest, so these are all due.)
		for len(q.byUntil.items) > 0 && !q.byUntil.items[0].until.After(now) {
			it := q.byUntil.items[0]
			q.unhold(it)
			q.bytes -= it.size
			drop = append(drop, it)
		}
		wait := time.Duration(-1) // nothing to wait for but a signal
		if len(q.byUntil.items) > 0 {
			wait = q.byUntil.items[0].until.Sub(now)
			if q.inFlight < q.cfg.Parallel {
				wait = min(wait, q.byNext.items[0].next.Sub(now))
			}
		}
		q.mu.Unlock()
		for i, it := range drop {
			q.report(it, it.err)
			drop[i] = nil
		}
		drop = drop[:0]
		q.checkIdle()
		if wait >= 0 {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-q.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	}
}

// try makes one attempt at it and then reports it, holds it for its next
// try, or drops it.
func (q *Queue[J]) try(it *item[J]) {
	defer q.tries.Done()
	err := q.cfg.Try(&it.job)
	now := time.Now()
	q.mu.Lock()
	q.inFlight--
	report := err == nil || !now.Before(it.until)
	if report {
		q.bytes -= it.size
	} else {
		it.err = err
		it.delay = min(2*it.delay, max(q.cfg.Max, q.cfg.First))
		it.next = minTime(now.Add(it.delay), it.until)
		q.hold(it)
	}
	q.signal()
	q.mu.Unlock()
	if report {
		q.report(it, err)
		q.checkIdle()
	}
}

// report tells Done of it.
func (q *Queue[J]) report(it *item[J], err error) {
	defer func() { _ = recover() }()
	q.cfg.Done(&it.job, err)
}

// checkIdle wakes Close when nothing is left.
func (q *Queue[J]) checkIdle() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.idle != nil && len(q.byNext.items) == 0 && q.inFlight == 0 {
		close(q.idle)
		q.idle = nil
	}
}

// Left is a job Close gave up on, with its latest failure.
type Left[J any] struct {
	Job J
	Err error
}

// Close stops new jobs from being added and keeps retrying those held
// until none is left or ctx is done; then it stops, waits for the tries in
// flight to end (each bounded by its store call's timeout), and returns
// the jobs not applied, for the caller to report (Done is not called for
// them). Close may be called more than once.
func (q *Queue[J]) Close(ctx context.Context) []Left[J] {
	q.mu.Lock()
	q.closed = true
	var idle chan struct{}
	if len(q.byNext.items) > 0 || q.inFlight > 0 {
		if q.idle == nil {
			q.idle = make(chan struct{})
		}
		idle = q.idle
	}
	q.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
		}
	}
	q.mu.Lock()
	q.stopped = true
	done := q.done
	q.signal()
	q.mu.Unlock()
	if done != nil {
		<-done
	}
	q.tries.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	var left []Left[J]
	for _, it := range q.byUntil.items {
		left = append(left, Left[J]{Job: it.job, Err: it.err})
	}
	q.byNext.items, q.byUntil.items, q.bytes = nil, nil, 0
	return left
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// jobHeap orders the waiting jobs by when they are due (which 0) or by
// deadline (which 1), keeping each job's index in it.
type jobHeap[J any] struct {
	which int
	items []*item[J]
}

func (h *jobHeap[J]) Len() int { return len(h.items) }
func (h *jobHeap[J]) Less(i, j int) bool {
	if h.which == 0 {
		return h.items[i].next.Before(h.items[j].next)
	}
	return h.items[i].until.Before(h.items[j].until)
}
func (h *jobHeap[J]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].at[h.which], h.items[j].at[h.which] = i, j
}
func (h *jobHeap[J]) Push(x any) {
	it := x.(*item[J])
	it.at[h.which] = len(h.items)
	h.items = append(h.items, it)
}
func (h *jobHeap[J]) Pop() any {
	it := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = nil
	h.items = h.items[:len(h.items)-1]
	return it
}
