package llmrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmrate/llmrate/internal/retryq"
)

// A reconcile the store failed to apply (unreachable, timed out) is tried
// again every reconcileRetryEvery until reconcileRetryFor has passed since
// it first failed; one still not applied is then counted (FailOpens),
// logged and reported to the observer: at 5 s, or when the try in flight
// then fails, within one store timeout more. Each waits on its own, at
// most retryParallel tries at once, so many failed reconciles do not
// delay each other's count. Stores apply a reconcile at most once by its
// ID (see Store), so a retry of one that was applied after all changes
// nothing. At most maxRetrying reconciles, holding at most
// maxRetryingBytes of their names and IDs, wait for a retry; past that one
// fails open at once.
const (
	reconcileRetryFor   = 5 * time.Second
	reconcileRetryEvery = 100 * time.Millisecond
	retryParallel       = reconcileWorkers
	maxRetrying         = 1 << 16
	maxRetryingBytes    = 32 << 20
)

// newRetrier returns the limiter's retry queue for failed reconciles.
func newRetrier(l *Limiter) *retryq.Queue[reconcileJob] {
	return retryq.New(retryq.Config[reconcileJob]{
		For: reconcileRetryFor, First: reconcileRetryEvery, Max: reconcileRetryEvery,
		Bound: maxRetrying, MaxBytes: maxRetryingBytes, Parallel: retryParallel,
		Size: func(j *reconcileJob) int64 { return j.req.heldSize() },
		Try: func(j *reconcileJob) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = &PanicError{Where: "reconcile", Value: p}
				}
			}()
			return l.calls.reconcile(context.Background(), j.req)
		},
		Done: func(j *reconcileJob, err error) {
			if err != nil {
				l.failOpen(&admission{key: j.req.Key, tier: j.tier}, "reconcile",
					&StoreError{Op: "reconcile", Err: fmt.Errorf("not applied after retrying for %v: %w", reconcileRetryFor, err)})
			}
		},
	})
}

// heldSize is about what a waiting reconcile holds: its strings, which come
// from clients, and a fixed part.
func (r *ReconcileRequest) heldSize() int64 {
	return int64(len(r.Key)+len(r.Workspace)+len(r.Model)+len(r.ID)+len(r.Receipt)) + 256
}

// retryReconcile hands a reconcile the store failed to the retry queue,
// or counts it at once when the queue is closed or full.
func (l *Limiter) retryReconcile(j reconcileJob, err error) {
	switch qerr := l.retry.Add(j, err); {
	case qerr == nil:
	default:
		why := "retries full"
		if errors.Is(qerr, retryq.ErrClosed) {
			why = "limiter closed"
		}
		l.failOpen(&admission{key: j.req.Key, tier: j.tier}, "reconcile", &StoreError{Op: "reconcile", Err: fmt.Errorf("%w (not retried: %s)", err, why)})
	}
}

// closeRetries keeps retrying until none is left or ctx is done, then
// counts what was not applied (each also a fail-open).
func (l *Limiter) closeRetries(ctx context.Context) (notApplied int) {
	if l.retry == nil {
		return 0
	}
	left := l.retry.Close(ctx)
	for _, j := range left {
		l.failOpen(&admission{key: j.Job.req.Key, tier: j.Job.tier}, "reconcile",
			&StoreError{Op: "reconcile", Err: fmt.Errorf("not applied before Close: %w", errors.Join(j.Err, context.Cause(ctx)))})
	}
	return len(left)
}
