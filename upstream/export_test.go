package upstream

import "time"

// SetReconcileRetry shortens t's reconcile retries for a test: retried for
// retryFor, first after first, at most maxWaiting at once. Call it before t
// is used.
func SetReconcileRetry(t *Transport, retryFor, first time.Duration, maxWaiting int) {
	t.retry = t.newRetrier(retryFor, first, maxWaiting)
}
