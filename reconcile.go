package llmrate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// DefaultReconcileQueue is how many reconciles to a non-memory store may
// wait for a worker by default (see WithReconcileQueue).
const DefaultReconcileQueue = 1024

// reconcileWorkers is how many goroutines apply queued reconciles (at most
// as many as the queue holds). Each holds one store call at a time.
const reconcileWorkers = 16

// WithReconcileQueue sets how many reconciles to a store other than the
// built-in memory store may wait to be applied after their response has
// completed. A reconcile is then applied by one of a few worker goroutines,
// so the client's response, the chunked terminator included, never waits
// for the store. When the queue is full a reconcile is applied on the
// request's goroutine instead, before its handler returns: reconciles are
// never dropped and never start a goroutine each. 0 applies every
// reconcile on the request's goroutine. Default: DefaultReconcileQueue. n
// must not be negative.
//
// Queued reconciles are not merged: two reconciles of one bucket do not in
// general add up to one (each charge is bounded at twice the bucket's
// capacity, and a credit stops at a full bucket, where a debit that came
// between would have made room).
//
// A limiter whose store is not the memory store starts its workers on its
// first queued reconcile; call Close to apply what is pending and stop them.
func WithReconcileQueue(n int) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.fail("WithReconcileQueue", errors.New("must not be negative"))
		}
		c.reconcileQueue = n
		c.reconcileQueueSet = true
	})
}

// reconcileJob is one reconcile waiting for a worker, with what a fault log
// line needs (the tracker it came from is reused by then).
type reconcileJob struct {
	req  ReconcileRequest
	tier Tier
	plan string
}

// reconcileQueue applies reconciles to a non-memory store off the response
// path.
type reconcileQueue struct {
	l       *Limiter
	jobs    chan reconcileJob
	workers int
	start   sync.Once
	wg      sync.WaitGroup
	quit    chan struct{}

	mu     sync.RWMutex // held for reading by every enqueue; for writing by Close
	closed bool

	pending atomic.Int64 // queued or being applied
	idleMu  sync.Mutex
	idle    chan struct{} // closed when pending drops to 0; nil when nobody waits

}

func newReconcileQueue(l *Limiter, n int) *reconcileQueue {
	return &reconcileQueue{l: l, jobs: make(chan reconcileJob, n), workers: min(n, reconcileWorkers), quit: make(chan struct{})}
}

// enqueue hands j to the workers, or reports false when the queue is full
// or closed (the caller then applies it itself).
func (q *reconcileQueue) enqueue(j reconcileJob) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return false
	}
	q.start.Do(q.startWorkers)
	q.pending.Add(1)
	select {
	case q.jobs <- j:
		return true
	default:
		q.done()
		return false
	}
}

func (q *reconcileQueue) startWorkers() {
	q.wg.Add(q.workers)
	for range q.workers {
		go q.work()
	}
}

func (q *reconcileQueue) work() {
	defer q.wg.Done()
	for {
		select { // quit first: once Close gives up, queued jobs are reported, not started
		case <-q.quit:
			return
		default:
		}
		select {
		case j := <-q.jobs:
			q.apply(j)
		case <-q.quit:
			return
		}
	}
}

func (q *reconcileQueue) apply(j reconcileJob) {
	defer q.done()
	defer func() {
		if p := recover(); p != nil { // e.g. an Observer that panicked
			q.l.failOpen(&admission{key: j.req.Key, tier: j.tier, plan: j.plan}, "reconcile", &PanicError{Where: "reconcile", Value: p})
		}
	}()
	if err := q.l.calls.reconcile(context.Background(), j.req); err != nil {
		q.l.retryReconcile(j, err) // tried again for a few seconds
	}
}

// done marks one reconcile applied (or taken back) and wakes flushers when
// none is left.
func (q *reconcileQueue) done() {
	if q.pending.Add(-1) != 0 {
		return
	}
	q.idleMu.Lock()
	if q.idle != nil {
		close(q.idle)
		q.idle = nil
	}
	q.idleMu.Unlock()
}

// flush waits until no reconcile is pending, or ctx is done.
func (q *reconcileQueue) flush(ctx context.Context) error {
	for {
		q.idleMu.Lock()
		if q.pending.Load() == 0 {
			q.idleMu.Unlock()
			return nil
		}
		if q.idle == nil {
			q.idle = make(chan struct{})
		}
		idle := q.idle
		q.idleMu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close stops new reconciles from queueing, applies the queued ones until
// ctx is done, stops the workers and returns how many queued reconciles
// were not applied (those that failed go to the retrier).
func (q *reconcileQueue) close(ctx context.Context) (dropped int64) {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	_ = q.flush(ctx)
	close(q.quit)
	q.wg.Wait() // each worker finishes at most one store call, bounded by the store timeout
	for {
		select {
		case j := <-q.jobs:
			dropped++
			q.pending.Add(-1)
			q.l.failOpen(&admission{key: j.req.Key, tier: j.tier, plan: j.plan}, "reconcile", &StoreError{Op: "reconcile", Err: fmt.Errorf("not applied before Close: %w", context.Cause(ctx))})
		default:
			return dropped
		}
	}
}

// reconcile applies req: at once for the memory store, else through the
// queue, or on this goroutine when the queue is full, closed or off.
func (l *Limiter) reconcile(ctx context.Context, a *admission, req *ReconcileRequest) {
	var err error
	switch {
	case l.mem != nil:
		// In process: no reply can be lost, so no identity is recorded;
		// the ID only releases the slots its admission holds.
		l.mem.reconcile(req)
	case l.rq != nil && l.rq.enqueue(reconcileJob{req: *req, tier: a.tier, plan: a.plan}):
		return
	default:
		if err = l.calls.reconcile(ctx, *req); err != nil {
			l.retryReconcile(reconcileJob{req: *req, tier: a.tier, plan: a.plan}, err) // tried again for a few seconds
			return
		}
	}
	if err != nil {
		l.failOpen(a, "reconcile", &StoreError{Op: "reconcile", Err: err})
	}
}

// Flush waits until every reconcile queued for a worker (see
// WithReconcileQueue) has been applied, or ctx is done (then it returns
// ctx's error). Under steady traffic new reconciles keep arriving: Flush
// returns once none is pending at one instant.
func (l *Limiter) Flush(ctx context.Context) error {
	if l.rq == nil {
		return nil
	}
	return l.rq.flush(ctx)
}

// Close applies the reconciles still queued, and retries those the store
// failed (a failed reconcile is otherwise retried for 5 s), waiting for
// them until ctx is done, stops the limiter's worker goroutines, unsubscribes its observer
// from the store's evictions (EvictionNotifier) and counters (StoreStats) and then closes the store if
// it has a Close(context.Context) error method. It reports the reconciles it
// could not apply (each also counted by FailOpens and logged) and the
// store's Close error. Requests served after Close still work: their
// reconciles are applied on the request's goroutine, and one the store
// fails is counted at once. Only the first call
// does anything; later calls return nil.
//
// Closing the store ends it for every limiter that shares it (a Redis
// store's leases are returned and no longer taken): close a shared store's
// limiters together, at shutdown.
func (l *Limiter) Close(ctx context.Context) error {
	var errs []error
	first := false
	l.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	if q := l.rq; q != nil {
		dropped := q.close(ctx)
		if dropped > 0 {
			errs = append(errs, fmt.Errorf("llmrate: %d queued reconciles not applied: %w", dropped, context.Cause(ctx)))
		}
	}
	// Reconciles the store failed are retried until ctx is done.
	if failed := l.closeRetries(ctx); failed > 0 {
		errs = append(errs, fmt.Errorf("llmrate: %d reconciles failed while closing, not applied (logged): %w", failed, context.Cause(ctx)))
	}
	if len(errs) > 0 {
		if ce := l.log.Check(zap.WarnLevel, "llmrate: close"); ce != nil {
			ce.Write(zap.Errors("errors", errs))
		}
	}
	if l.stopObserving != nil {
		l.stopObserving() // the store may outlive the limiter
	}
	if c, ok := l.cfg.store.(interface{ Close(context.Context) error }); ok {
		if err := c.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("llmrate: closing the store: %w", err))
		}
	}
	return errors.Join(errs...)
}
