package llmrate_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hungStore admits everything and never answers a reconcile, whatever its
// context says, until released.
type hungStore struct {
	release chan struct{}
	calls   atomic.Int64
}

func (s *hungStore) Admit(context.Context, llmrate.AdmitRequest) (llmrate.Decision, error) {
	return llmrate.Decision{Allowed: true, Remaining: [4]int64{1, 1, 1, 1}}, nil
}

func (s *hungStore) Reconcile(context.Context, llmrate.ReconcileRequest) error {
	s.calls.Add(1)
	<-s.release
	return nil
}

func newHungStore(t *testing.T) *hungStore {
	s := &hungStore{release: make(chan struct{})}
	t.Cleanup(func() { close(s.release) })
	return s
}

// TestFailedReconcilesDroppedOnTime: of 300 reconciles failing against a
// store that never answers, every one is dropped and counted within 5 s
// of its first failure plus one store timeout (and some slack for a loaded
// machine), none before 5 s: the retries of one do not wait for the
// others' (before, a pass over 300 took 300 × the timeout, 15 s, and 6.5 s
// after the last first failure only 65 had been counted).
func TestFailedReconcilesDroppedOnTime(t *testing.T) {
	t.Parallel()
	const (
		n        = 300
		timeout  = 50 * time.Millisecond
		retryFor = 5 * time.Second // README: a failed reconcile is retried for 5 s
		slack    = 700 * time.Millisecond
	)
	s := newHungStore(t)
	rec := &recorder{}
	h := newHarness(t, usageHandlerFromHeader(), llmrate.WithStore(s), llmrate.WithStoreTimeout(timeout), llmrate.WithObserver(rec))
	// counts are the fail-opens so far: reconciles dropped, and admissions
	// (on a loaded machine an admission's guarded call may pass the 50 ms
	// too: that request then has no reconcile; CI saw one at 1.1 s).
	counts := func() (reconciles, admissions int) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.failOpens {
			if e.Op == "reconcile" {
				reconciles++
			} else {
				admissions++
			}
		}
		return reconciles, admissions
	}
	start := time.Now()
	for i := range n {
		h.sendUsage("sk-hung", int64(100+i))
	}
	require.NoError(t, h.lim.Flush(context.Background()), "every first try has failed and gone to the retries")
	lastFirstFailure := time.Now()
	deadline := lastFirstFailure.Add(retryFor + timeout + slack)
	var firstDrop time.Time
	for time.Now().Before(deadline) && h.lim.FailOpens() < n {
		if r, _ := counts(); firstDrop.IsZero() && r > 0 {
			firstDrop = time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r, _ := counts(); firstDrop.IsZero() && r > 0 {
		firstDrop = time.Now()
	}
	reconciles, admissions := counts()
	t.Logf("%d reconciles dropped %v after the last first failure (%d admissions failed open)", reconciles, time.Since(lastFirstFailure), admissions)
	assert.Equal(t, int64(n), h.lim.FailOpens(), "dropped and counted %v after the last first failure", time.Since(lastFirstFailure))
	assert.Equal(t, n, reconciles+admissions, "every fail-open observed")
	require.False(t, firstDrop.IsZero())
	assert.GreaterOrEqual(t, firstDrop.Sub(start), retryFor, "none is dropped before it was retried for 5 s")
	assert.Greater(t, s.calls.Load(), int64(2*n), "each was tried again")
}

// TestFailedReconcileBacklogBounded: the reconciles waiting for a retry
// hold their raw keys, which can be as large as a header; what they hold
// is bounded in bytes (32 MiB) as well as in number: past it a failed
// reconcile is dropped and counted at once.
func TestFailedReconcileBacklogBounded(t *testing.T) {
	t.Parallel()
	s := newHungStore(t)
	h := newHarness(t, usageHandlerFromHeader(), llmrate.WithStore(s), llmrate.WithStoreTimeout(10*time.Millisecond))
	key := "sk-" + strings.Repeat("k", 1<<20) // each key is its own workspace: 2 MiB held per reconcile
	const n = 40
	for i := range n {
		h.sendUsage(key, int64(100+i))
	}
	require.NoError(t, h.lim.Flush(context.Background()))
	// At most 16 of 2 MiB fit in 32 MiB; the rest were dropped at once.
	assert.GreaterOrEqual(t, h.lim.FailOpens(), int64(n-16))
	assert.Less(t, h.lim.FailOpens(), int64(n), "some wait for a retry")
}
