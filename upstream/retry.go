package upstream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/llmrate/llmrate"
	"go.uber.org/zap"
)

// A reconcile the store did not apply (an error, a call past
// WithStoreTimeout, a panic) is tried again on the Transport's retry
// goroutine, first after reconcileRetryFirst, then at intervals doubling
// to reconcileRetryMax while the store keeps failing, until
// ReconcileRetryFor has passed since its first failure; one still not
// applied then is dropped: counted (FailOpens, DroppedReconciles), logged
// at warn and reported to the observer. Stores apply a reconcile at most
// once by its ID, so a retry of one that was applied after all changes
// nothing. At most maxRetrying reconciles wait at once; past that one is
// dropped at once.
const (
	// ReconcileRetryFor is how long a reconcile the store did not apply is
	// retried, from its first failure, before it is dropped.
	ReconcileRetryFor   = 5 * time.Second
	reconcileRetryFirst = 50 * time.Millisecond
	reconcileRetryMax   = time.Second
	maxRetrying         = 1 << 14
)

// retryJob is a reconcile the store has not applied yet.
type retryJob struct {
	ctx   context.Context // the request's, for its values
	req   llmrate.ReconcileRequest
	ev    ReconcileEvent
	until time.Time // dropped when a try at or after it fails
	err   error     // the latest failure
}

// retrier retries failed reconciles on one goroutine, which runs only while
// some wait.
type retrier struct {
	retryFor, first time.Duration // ReconcileRetryFor, reconcileRetryFirst (tests shorten them)
	max             int           // maxRetrying

	mu       sync.Mutex
	jobs     []retryJob
	closed   bool          // Close was called: nothing more is queued
	done     chan struct{} // closed when the running goroutine ends; nil when none runs
	stop     chan struct{} // closed by Close when its context is done: give up
	stopOnce sync.Once
}

func (rt *retrier) init() {
	rt.retryFor, rt.first, rt.max = ReconcileRetryFor, reconcileRetryFirst, maxRetrying
	rt.stop = make(chan struct{})
}

// reconcile applies j.req, retrying it on the retry goroutine if the store
// fails, and reports it once applied or dropped.
func (t *Transport) reconcile(j retryJob) {
	err := t.reconcileOnce(j.ctx, j.req)
	if err == nil {
		t.reconciled(&j, nil)
		return
	}
	j.err, j.until = err, time.Now().Add(t.retry.retryFor)
	rt := &t.retry
	rt.mu.Lock()
	if rt.closed || len(rt.jobs) >= rt.max {
		rt.mu.Unlock()
		why := "too many waiting"
		if rt.closed {
			why = "Transport closed"
		}
		t.reconciled(&j, fmt.Errorf("reconcile not retried (%s): %w", why, err))
		return
	}
	rt.jobs = append(rt.jobs, j)
	if rt.done == nil {
		rt.done = make(chan struct{})
		go t.retryLoop(rt.done)
	}
	rt.mu.Unlock()
	if ce := t.log.Check(zap.DebugLevel, "upstream: reconcile not applied; retrying"); ce != nil {
		ce.Write(zap.String("upstream_key", j.ev.Key), zap.Error(err))
	}
}

// retryLoop tries the waiting reconciles again until none is left or Close
// gives up on them.
func (t *Transport) retryLoop(done chan struct{}) {
	rt := &t.retry
	defer close(done)
	delay := rt.first
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-rt.stop:
			return
		}
		rt.mu.Lock()
		jobs := rt.jobs
		rt.jobs = nil
		rt.mu.Unlock()
		var left []retryJob
		failed := false
		for i := range jobs {
			select {
			case <-rt.stop:
				rt.mu.Lock()
				rt.jobs = append(append(left, jobs[i:]...), rt.jobs...)
				rt.mu.Unlock()
				return
			default:
			}
			j := &jobs[i]
			j.ev.Retries++
			err := t.reconcileOnce(j.ctx, j.req)
			switch {
			case err == nil:
				t.reconciled(j, nil)
			case !time.Now().Before(j.until):
				t.reconciled(j, fmt.Errorf("reconcile not applied after retrying for %v: %w", rt.retryFor, err))
			default:
				j.err, failed = err, true
				left = append(left, *j)
			}
		}
		rt.mu.Lock()
		rt.jobs = append(left, rt.jobs...)
		if len(rt.jobs) == 0 {
			rt.done = nil
			rt.mu.Unlock()
			return
		}
		rt.mu.Unlock()
		if failed {
			delay = min(2*delay, max(reconcileRetryMax, rt.first))
		} else {
			delay = rt.first
		}
		timer.Reset(delay)
	}
}

// reconcileOnce makes one store call for req.
func (t *Transport) reconcileOnce(ctx context.Context, req llmrate.ReconcileRequest) error {
	_, err := callStore(t, ctx, "reconcile", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.store.Reconcile(ctx, req)
	})
	return err
}

// reconciled reports j: applied (err nil), or dropped, which is counted and
// logged.
func (t *Transport) reconciled(j *retryJob, err error) {
	ev := j.ev
	ev.Err = err
	if err != nil {
		t.dropped.Add(1)
		t.fault("reconcile", ev.Key, err)
	}
	if t.observer != nil {
		t.observer.Reconciled(ev)
	}
	if ce := t.log.Check(zap.DebugLevel, "upstream: reconciled"); ce != nil {
		ce.Write(zap.String("upstream_key", ev.Key), zap.Stringer("kind", ev.Kind), zap.Int64("estimate", ev.Estimate),
			zap.Int64("actual", ev.Actual), zap.Bool("refund", ev.Refund), zap.Bool("cut", ev.Cut), zap.Int("retries", ev.Retries))
	}
}

// DroppedReconciles returns how many reconciles the store never applied:
// still failing ReconcileRetryFor after their first failure, waiting when
// Close gave up, or failing when too many (or, after Close, any) were
// already waiting. Each left its estimate standing in place of the charge
// (or refund), and is counted in FailOpens too.
func (t *Transport) DroppedReconciles() int64 { return t.dropped.Load() }

// Close waits until every reconcile the store failed to apply has been
// applied or dropped (see DroppedReconciles), or until ctx is done: those
// still waiting then are dropped, counted and reported, and Close returns
// an error saying how many, wrapping ctx's cause. The Transport never
// closes its store (it does not own it). Call it when the gateway shuts
// down, after the responses it relays are closed. The Transport stays
// usable after Close, but a reconcile the store fails after it is dropped
// at once. Close may be called more than once.
func (t *Transport) Close(ctx context.Context) error {
	rt := &t.retry
	rt.mu.Lock()
	rt.closed = true
	done := rt.done
	rt.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			rt.stopOnce.Do(func() { close(rt.stop) })
			<-done
		}
	}
	rt.mu.Lock()
	jobs := rt.jobs
	rt.jobs = nil
	rt.mu.Unlock()
	for i := range jobs {
		t.reconciled(&jobs[i], fmt.Errorf("reconcile not applied before Close (%w): %w", context.Cause(ctx), jobs[i].err))
	}
	if len(jobs) > 0 {
		return fmt.Errorf("upstream: %d reconciles not applied before Close: %w", len(jobs), context.Cause(ctx))
	}
	return nil
}
