package llmrate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A reconcile the store failed to apply (unreachable, timed out) is tried
// again every reconcileRetryEvery until reconcileRetryFor has passed since
// it first failed; one still not applied is then counted (FailOpens),
// logged and reported to the observer. Stores apply a reconcile at most
// once by its ID (see Store), so a retry of one that was applied after all
// changes nothing. At most maxRetrying reconciles wait for a retry; past
// that one fails open at once.
const (
	reconcileRetryFor   = 5 * time.Second
	reconcileRetryEvery = 100 * time.Millisecond
	maxRetrying         = 1 << 16
)

// retryJob is a failed reconcile waiting for its next try.
type retryJob struct {
	job   reconcileJob
	until time.Time
	err   error
}

// retrier retries failed reconciles on one goroutine of its own, which
// runs only while some wait.
type retrier struct {
	l       *Limiter
	mu      sync.Mutex
	jobs    []retryJob
	running bool
	closed  bool
	stop    chan struct{} // closed by close: give up on what is left
	done    chan struct{} // closed when the goroutine ends; nil when none runs
}

// retryReconcile hands a reconcile the store failed to the retrier.
func (l *Limiter) retryReconcile(j reconcileJob, err error) {
	rt := &l.retry
	rt.mu.Lock()
	if rt.closed || len(rt.jobs) >= maxRetrying {
		rt.mu.Unlock()
		why := "retries full"
		if rt.closed {
			why = "limiter closed"
		}
		l.failOpen(&admission{key: j.req.Key, tier: j.tier}, "reconcile", &StoreError{Op: "reconcile", Err: fmt.Errorf("%w (not retried: %s)", err, why)})
		return
	}
	rt.l = l
	rt.jobs = append(rt.jobs, retryJob{job: j, until: time.Now().Add(reconcileRetryFor), err: err})
	if !rt.running {
		rt.running = true
		if rt.stop == nil {
			rt.stop = make(chan struct{})
		}
		rt.done = make(chan struct{})
		go rt.run(rt.done)
	}
	rt.mu.Unlock()
}

func (rt *retrier) run(done chan struct{}) {
	defer close(done)
	t := time.NewTimer(reconcileRetryEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-rt.stop:
			return
		}
		rt.mu.Lock()
		jobs := rt.jobs
		rt.jobs = nil
		rt.mu.Unlock()
		var left []retryJob
		for i, j := range jobs {
			select {
			case <-rt.stop:
				rt.mu.Lock()
				rt.jobs = append(append(left, jobs[i:]...), rt.jobs...)
				rt.mu.Unlock()
				return
			default:
			}
			err := rt.l.calls.reconcile(context.Background(), j.job.req)
			switch {
			case err == nil:
			case time.Now().After(j.until):
				rt.l.failOpen(&admission{key: j.job.req.Key, tier: j.job.tier}, "reconcile",
					&StoreError{Op: "reconcile", Err: fmt.Errorf("not applied after retrying for %v: %w", reconcileRetryFor, err)})
			default:
				j.err = err
				left = append(left, j)
			}
		}
		rt.mu.Lock()
		rt.jobs = append(left, rt.jobs...)
		if len(rt.jobs) == 0 {
			rt.running = false
			rt.mu.Unlock()
			return
		}
		rt.mu.Unlock()
		t.Reset(reconcileRetryEvery)
	}
}

// close keeps retrying until none is left or ctx is done, then stops the
// goroutine and counts what was not applied (each also a fail-open).
func (rt *retrier) close(ctx context.Context) (notApplied int) {
	rt.mu.Lock()
	rt.closed = true
	done := rt.done
	rt.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			rt.mu.Lock()
			if rt.stop != nil {
				close(rt.stop)
			}
			rt.mu.Unlock()
			<-done
		}
	}
	rt.mu.Lock()
	jobs := rt.jobs
	rt.jobs = nil
	rt.mu.Unlock()
	for _, j := range jobs {
		rt.l.failOpen(&admission{key: j.job.req.Key, tier: j.job.tier}, "reconcile",
			&StoreError{Op: "reconcile", Err: fmt.Errorf("not applied before Close: %w", errors.Join(j.err, context.Cause(ctx)))})
	}
	return len(jobs)
}
