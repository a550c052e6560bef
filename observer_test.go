package llmrate_test

import (
	"sync"

	"github.com/llmrate/llmrate"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu         sync.Mutex
	decisions  []llmrate.DecisionEvent
	reconciles []llmrate.ReconcileEvent
	failOpens  []llmrate.FailOpenEvent
	evictions  int
}

func (r *recorder) Decided(e llmrate.DecisionEvent) {
	r.mu.Lock()
	r.decisions = append(r.decisions, e)
	r.mu.Unlock()
}

func (r *recorder) Reconciled(e llmrate.ReconcileEvent) {
	r.mu.Lock()
	r.reconciles = append(r.reconciles, e)
	r.mu.Unlock()
}

func (r *recorder) FailedOpen(e llmrate.FailOpenEvent) {
	r.mu.Lock()
	r.failOpens = append(r.failOpens, e)
	r.mu.Unlock()
}

func (r *recorder) Evicted() {
	r.mu.Lock()
	r.evictions++
	r.mu.Unlock()
}

func (r *recorder) lastReconcile() (llmrate.ReconcileEvent, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reconciles) == 0 {
		return llmrate.ReconcileEvent{}, 0
	}
	return r.reconciles[len(r.reconciles)-1], len(r.reconciles)
}
