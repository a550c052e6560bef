package upstream

import "time"

// SetReconcileRetry shortens t's reconcile retries for a test: retried for
// retryFor, first after first, at most maxWaiting at once. Call it before t
// is used.
func SetReconcileRetry(t *Transport, retryFor, first time.Duration, maxWaiting int) {
	t.retry = t.newRetrier(retryFor, first, maxWaiting)
}

// SkippedModels returns how many per-model skips key name holds, and the
// bytes of their names.
func SkippedModels(t *Transport, name string) (n, bytes int) {
	for i := range t.keys {
		if k := &t.keys[i]; k.Name == name {
			k.skips.mu.Lock()
			defer k.skips.mu.Unlock()
			for m := range k.skips.models {
				n, bytes = n+1, bytes+len(m.name)
			}
			return n, bytes
		}
	}
	panic("no key " + name)
}
