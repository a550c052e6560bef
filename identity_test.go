package llmrate_test

import (
	"context"
	"encoding/base64"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flakyStore records the identities it is sent, gives every admission a
// receipt of its own, and fails reconciles while failing is set.
type flakyStore struct {
	mu        sync.Mutex
	ids       []string
	receipts  map[string]string // receipt by admission ID
	reconcile []llmrate.ReconcileRequest
	tries     int
	failing   bool
}

func (s *flakyStore) Admit(_ context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, r.ID)
	receipt := "decided-by-" + r.ID[:4]
	if s.receipts == nil {
		s.receipts = map[string]string{}
	}
	s.receipts[r.ID] = receipt
	return llmrate.Decision{Allowed: true, Remaining: [4]int64{1, 1, 1, 1}, Receipt: receipt}, nil
}

func (s *flakyStore) Reconcile(_ context.Context, r llmrate.ReconcileRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	if s.failing {
		return errors.New("redis unreachable")
	}
	s.reconcile = append(s.reconcile, r)
	return nil
}

func (s *flakyStore) setFailing(f bool) {
	s.mu.Lock()
	s.failing = f
	s.mu.Unlock()
}

func (s *flakyStore) applied() []llmrate.ReconcileRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]llmrate.ReconcileRequest(nil), s.reconcile...)
}

// TestAdmissionIdentityCarried: the limiter gives every admission to a
// non-memory store a fresh ID, and its reconcile carries that ID and the
// store's receipt unchanged.
func TestAdmissionIdentityCarried(t *testing.T) {
	t.Parallel()
	s := &flakyStore{}
	h := newHarness(t, usageHandlerFromHeader(), llmrate.WithStore(s))
	h.sendUsage("sk-i", 500)
	h.sendUsage("sk-i", 600)
	require.NoError(t, h.lim.Flush(context.Background()))
	s.mu.Lock()
	ids := append([]string(nil), s.ids...)
	receipts := s.receipts
	s.mu.Unlock()
	require.Len(t, ids, 2)
	assert.Len(t, ids[0], 22, "NewAdmissionID: 128 bits, base64url")
	assert.NotEqual(t, ids[0], ids[1], "one identity per admission")
	got := s.applied()
	require.Len(t, got, 2)
	for _, r := range got { // applied by the queue's workers, in any order
		i := int(r.Actual-500) / 100 // the first request used 500 tokens, the second 600
		require.Contains(t, []int{0, 1}, i, "actual %d", r.Actual)
		assert.Equal(t, ids[i], r.ID, "reconcile %d carries its admission's ID", i)
		assert.Equal(t, receipts[ids[i]], r.Receipt, "and its receipt")
	}
}

// TestFailedReconcileRetried: a reconcile the store fails is retried until
// the store is back (here after half a second), applied once and not
// counted; with the store still failing, Close (bounded by its context)
// counts it as not applied, a fail-open the observer is told of, never
// dropped silently.
func TestFailedReconcileRetried(t *testing.T) {
	t.Parallel()
	s := &flakyStore{failing: true}
	obs := &recorder{}
	h := newHarness(t, usageHandlerFromHeader(), llmrate.WithStore(s), llmrate.WithObserver(obs))
	h.sendUsage("sk-r", 500)
	require.NoError(t, h.lim.Flush(context.Background()))
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.tries >= 3
	}, 5*time.Second, 10*time.Millisecond, "tried again")
	assert.Empty(t, s.applied())
	s.setFailing(false)
	require.Eventually(t, func() bool { return len(s.applied()) == 1 }, 5*time.Second, 10*time.Millisecond, "applied once the store is back")
	assert.Equal(t, int64(500), s.applied()[0].Actual)
	assert.Zero(t, h.lim.FailOpens())

	s.setFailing(true)
	h.sendUsage("sk-r", 700)
	require.NoError(t, h.lim.Flush(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := h.lim.Close(ctx)
	require.Error(t, err)
	assert.ErrorContains(t, err, "1 reconciles failed while closing")
	assert.Equal(t, int64(1), h.lim.FailOpens())
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.failOpens, 1)
	assert.Equal(t, "reconcile", obs.failOpens[0].Op)
}

// TestAdmissionIDsUniqueAcrossGoroutines: identities drawn at once on
// many goroutines are 22 base64url bytes holding 16 bytes, and no two
// are alike.
func TestAdmissionIDsUniqueAcrossGoroutines(t *testing.T) {
	const goroutines, each = 8, 5000
	got := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				got[g] = append(got[g], llmrate.NewAdmissionID())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for _, ids := range got {
		for _, id := range ids {
			b, err := base64.RawURLEncoding.DecodeString(id)
			require.NoError(t, err, "%q", id)
			require.Len(t, b, 16, "%q", id)
			require.False(t, seen[id], "%q drawn twice", id)
			seen[id] = true
		}
	}
}
