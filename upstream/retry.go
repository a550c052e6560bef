package upstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/retryq"
	"go.uber.org/zap"
)

// A reconcile the store did not apply (an error, a call past
// WithStoreTimeout, a panic) is tried again, first after
// reconcileRetryFirst, then at intervals doubling to reconcileRetryMax
// while the store keeps failing, until ReconcileRetryFor has passed since
// its first failure; one still not applied then is dropped: counted
// (FailOpens, DroppedReconciles), logged at warn and reported to the
// observer — at ReconcileRetryFor, or when the try in flight then fails,
// within one store timeout more. Each waits on its own, at most
// retryParallel tries at once, so many failed reconciles do not delay each
// other's drop. Stores apply a reconcile at most once by its ID, so a retry
// of one that was applied after all changes nothing. At most maxRetrying
// reconciles, holding at most maxRetryingBytes of their names and IDs,
// wait at once; past that one is dropped at once.
const (
	// ReconcileRetryFor is how long a reconcile the store did not apply is
	// retried, from its first failure, before it is dropped.
	ReconcileRetryFor   = 5 * time.Second
	reconcileRetryFirst = 50 * time.Millisecond
	reconcileRetryMax   = time.Second
	retryParallel       = 16
	maxRetrying         = 1 << 14
	maxRetryingBytes    = 32 << 20
)

// retryJob is a reconcile the store has not applied yet.
type retryJob struct {
	ctx context.Context // the request's, for its values
	req llmrate.ReconcileRequest
	ev  ReconcileEvent
}

// newRetrier returns t's retry queue: retried for retryFor, first after
// first, at most maxWaiting at once.
func (t *Transport) newRetrier(retryFor, first time.Duration, maxWaiting int) *retryq.Queue[retryJob] {
	return retryq.New(retryq.Config[retryJob]{
		For: retryFor, First: first, Max: max(reconcileRetryMax, first),
		Bound: maxWaiting, MaxBytes: maxRetryingBytes, Parallel: retryParallel,
		Size: func(j *retryJob) int64 {
			r := &j.req
			return int64(len(r.Key)+len(r.Workspace)+len(r.Model)+len(r.ID)+len(r.Receipt)+len(j.ev.Key)) + 512
		},
		Try: func(j *retryJob) error {
			j.ev.Retries++
			return t.reconcileOnce(j.ctx, j.req)
		},
		Done: func(j *retryJob, err error) {
			if err != nil {
				err = fmt.Errorf("reconcile not applied after retrying for %v: %w", retryFor, err)
			}
			t.reconciled(j, err)
		},
	})
}

// reconcile applies j.req, retrying it on the retry queue if the store
// fails, and reports it once applied or dropped.
func (t *Transport) reconcile(j retryJob) {
	err := t.reconcileOnce(j.ctx, j.req)
	if err == nil {
		t.reconciled(&j, nil)
		return
	}
	if qerr := t.retry.Add(j, err); qerr != nil {
		why := "too many waiting"
		if errors.Is(qerr, retryq.ErrClosed) {
			why = "Transport closed"
		}
		t.reconciled(&j, fmt.Errorf("reconcile not retried (%s): %w", why, err))
		return
	}
	if ce := t.log.Check(zap.DebugLevel, "upstream: reconcile not applied; retrying"); ce != nil {
		ce.Write(zap.String("upstream_key", j.ev.Key), zap.Error(err))
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
	left := t.retry.Close(ctx)
	for i := range left {
		j := &left[i].Job
		t.reconciled(j, fmt.Errorf("reconcile not applied before Close (%w): %w", context.Cause(ctx), left[i].Err))
	}
	if len(left) > 0 {
		return fmt.Errorf("upstream: %d reconciles not applied before Close: %w", len(left), context.Cause(ctx))
	}
	return nil
}
