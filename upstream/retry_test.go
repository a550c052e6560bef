package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// recordingStore is a memory store that records every call, gives each
// admitted decision a receipt of its own, and fails the first failN
// reconciles (every one when failN < 0).
type recordingStore struct {
	*llmrate.MemoryStore
	mu         sync.Mutex
	failN      int
	admits     []admitted
	reconciles []reconciled
}

type admitted struct {
	req llmrate.AdmitRequest
	d   llmrate.Decision
}

type reconciled struct {
	req llmrate.ReconcileRequest
	at  time.Time // wall time of the call
	err error
}

func newRecordingStore(failN int) *recordingStore {
	return &recordingStore{MemoryStore: llmrate.NewMemoryStore(), failN: failN}
}

func (s *recordingStore) Admit(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	d, err := s.MemoryStore.Admit(ctx, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Allowed {
		d.Receipt = fmt.Sprintf("receipt-%d", len(s.admits))
	}
	s.admits = append(s.admits, admitted{r, d})
	return d, err
}

func (s *recordingStore) Reconcile(ctx context.Context, r llmrate.ReconcileRequest) error {
	s.mu.Lock()
	fail := s.failN != 0
	if s.failN > 0 {
		s.failN--
	}
	s.mu.Unlock()
	var err error
	if fail {
		err = errors.New("store unreachable")
	} else {
		err = s.MemoryStore.Reconcile(ctx, r)
	}
	s.mu.Lock()
	s.reconciles = append(s.reconciles, reconciled{r, time.Now(), err})
	s.mu.Unlock()
	return err
}

func (s *recordingStore) calls() ([]admitted, []reconciled) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]admitted(nil), s.admits...), append([]reconciled(nil), s.reconciles...)
}

// retryRig is a Transport over one key "a" (100 rpm, 1000 tpm) on a
// recording store.
func retryRig(t *testing.T, s *recordingStore, opts ...upstream.Option) (*upstream.Transport, *provider, *recorder, *fakeClock) {
	t.Helper()
	p, rec, clk := newProvider(t), &recorder{}, newClock()
	tr, err := upstream.New([]upstream.Key{bearerKey("a", "sk-secret-a", 100, 1000)},
		append([]upstream.Option{upstream.WithStore(s), upstream.WithClock(clk.Now), upstream.WithObserver(rec)}, opts...)...)
	require.NoError(t, err)
	return tr, p, rec, clk
}

func postVia(t *testing.T, tr *upstream.Transport, url string) {
	t.Helper()
	resp, err := (&http.Client{Transport: tr}).Post(url, "application/json", strings.NewReader(chat("m", 400)))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
}

var limitsA = llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 1000}

// A reconcile the store fails is retried until it is applied: the charge
// lands, nothing is counted as a fault, the observer hears of it once,
// and every try carries the admission's ID and receipt.
func TestReconcileRetriedUntilApplied(t *testing.T) {
	t.Parallel()
	s := newRecordingStore(3)
	tr, p, rec, clk := retryRig(t, s)
	upstream.SetReconcileRetry(tr, upstream.ReconcileRetryFor, time.Millisecond, 100)
	postVia(t, tr, p.srv.URL)
	require.NoError(t, tr.Close(context.Background()))

	ws := "upstream:a"
	// 400 bytes estimated 100 tokens; the provider reported 10 + 5.
	assert.Equal(t, [4]int64{199, 2000 - 15, 199, 2000 - 15}, s.Levels(ws, ws, limitsA, limitsA, clk.Now()), "the charge replaced the estimate")
	assert.Zero(t, tr.FailOpens())
	assert.Zero(t, tr.DroppedReconciles())
	ev := rec.reconciled()
	require.Len(t, ev, 1)
	assert.NoError(t, ev[0].Err)
	assert.Equal(t, 3, ev[0].Retries)
	assert.Equal(t, int64(15), ev[0].Actual)
	admits, recs := s.calls()
	require.Len(t, admits, 1)
	require.Len(t, recs, 4, "three failures, then applied")
	for _, r := range recs {
		assert.Equal(t, admits[0].req.ID, r.req.ID)
		assert.Equal(t, admits[0].d.Receipt, r.req.Receipt)
	}
	assert.NoError(t, recs[3].err)
}

// A reconcile the store never applies is retried for the whole retry
// window, then dropped: counted (FailOpens, DroppedReconciles), logged at
// warn by the key's name, and reported to the observer with the store's
// error. The estimate stands.
func TestReconcileDroppedAfterRetrying(t *testing.T) {
	t.Parallel()
	s := newRecordingStore(-1)
	core, logs := observer.New(zap.DebugLevel)
	tr, p, rec, clk := retryRig(t, s, upstream.WithLogger(zap.New(core)))
	const window = 30 * time.Millisecond
	upstream.SetReconcileRetry(tr, window, time.Millisecond, 100)
	postVia(t, tr, p.srv.URL)
	require.NoError(t, tr.Close(context.Background()), "Close waited until it was dropped")

	ws := "upstream:a"
	assert.Equal(t, [4]int64{199, 2000 - 100, 199, 2000 - 100}, s.Levels(ws, ws, limitsA, limitsA, clk.Now()), "the estimate stands")
	assert.Equal(t, int64(1), tr.DroppedReconciles())
	assert.Equal(t, int64(1), tr.FailOpens())
	ev := rec.reconciled()
	require.Len(t, ev, 1)
	var se *llmrate.StoreError
	require.True(t, errors.As(ev[0].Err, &se), "%v", ev[0].Err)
	_, recs := s.calls()
	require.GreaterOrEqual(t, len(recs), 2)
	assert.Equal(t, len(recs)-1, ev[0].Retries)
	assert.GreaterOrEqual(t, recs[len(recs)-1].at.Sub(recs[0].at), window, "retried for the whole window")
	for _, r := range recs {
		assert.Equal(t, recs[0].req.ID, r.req.ID)
		assert.Equal(t, recs[0].req.Receipt, r.req.Receipt)
	}
	warns := logs.FilterLevelExact(zap.WarnLevel).All()
	require.Len(t, warns, 1)
	assert.Equal(t, "a", warns[0].ContextMap()["upstream_key"])
	for _, e := range logs.All() {
		assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), "sk-secret")
	}
}

// Close whose context ends gives up on the reconciles still waiting: each
// is dropped, counted and reported, and Close says how many, with the
// context's cause. After Close a reconcile the store fails is dropped at
// once.
func TestCloseGivesUpOnWaitingReconciles(t *testing.T) {
	t.Parallel()
	s := newRecordingStore(-1)
	tr, p, rec, _ := retryRig(t, s)
	upstream.SetReconcileRetry(tr, time.Hour, time.Millisecond, 100)
	postVia(t, tr, p.srv.URL)
	postVia(t, tr, p.srv.URL)
	assert.Zero(t, tr.DroppedReconciles(), "still being retried")
	ctx, cancel := context.WithCancelCause(context.Background())
	shutdown := errors.New("shutting down")
	cancel(shutdown)
	err := tr.Close(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, shutdown)
	assert.Contains(t, err.Error(), "2 reconciles not applied")
	assert.Equal(t, int64(2), tr.DroppedReconciles())
	assert.Equal(t, int64(2), tr.FailOpens())
	ev := rec.reconciled()
	require.Len(t, ev, 2)
	for _, e := range ev {
		assert.ErrorIs(t, e.Err, shutdown)
	}

	postVia(t, tr, p.srv.URL)
	assert.Equal(t, int64(3), tr.DroppedReconciles(), "after Close: dropped at once")
	ev = rec.reconciled()
	require.Len(t, ev, 1)
	assert.Zero(t, ev[0].Retries)
	assert.Error(t, ev[0].Err)
	require.NoError(t, tr.Close(context.Background()), "again: nothing waits")
}

// At most a bounded number of reconciles wait for a retry; past it one is
// dropped at once, counted.
func TestReconcileRetryBounded(t *testing.T) {
	t.Parallel()
	s := newRecordingStore(-1)
	tr, p, _, _ := retryRig(t, s)
	upstream.SetReconcileRetry(tr, time.Hour, time.Hour, 1)
	postVia(t, tr, p.srv.URL)
	postVia(t, tr, p.srv.URL)
	assert.Equal(t, int64(1), tr.DroppedReconciles(), "the second found the queue full")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, tr.Close(ctx), context.Canceled)
	assert.Equal(t, int64(2), tr.DroppedReconciles())
}

// stalledStore admits everything and answers every reconcile only when its
// context ends (at the store timeout), with that error.
type stalledStore struct{ calls atomic.Int64 }

func (s *stalledStore) Admit(context.Context, llmrate.AdmitRequest) (llmrate.Decision, error) {
	return llmrate.Decision{Allowed: true, Remaining: [4]int64{1, 1, 1, 1}}, nil
}

func (s *stalledStore) Reconcile(ctx context.Context, _ llmrate.ReconcileRequest) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestFailedReconcilesDroppedOnTime: of 300 reconciles failing against a
// store that answers only at its timeout, each is dropped and counted
// within its retry time plus one store timeout (and some slack for a
// loaded machine) of its first failure, none sooner: one's retries do not
// wait for the others' (tried one after another, a pass over 300 took
// 300 × the timeout, 6 s here).
func TestFailedReconcilesDroppedOnTime(t *testing.T) {
	t.Parallel()
	const (
		n        = 300
		timeout  = 20 * time.Millisecond
		retryFor = time.Second
		slack    = 500 * time.Millisecond
	)
	s := &stalledStore{}
	p := newProvider(t)
	tr, err := upstream.New([]upstream.Key{bearerKey("a", "sk-secret-a", 100_000, 100_000_000)},
		upstream.WithStore(s), upstream.WithStoreTimeout(timeout))
	require.NoError(t, err)
	upstream.SetReconcileRetry(tr, retryFor, 10*time.Millisecond, 1000)
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			postVia(t, tr, p.srv.URL)
		}()
	}
	wg.Wait()
	lastFirstFailure := time.Now() // each response's reconcile failed before it returned
	deadline := lastFirstFailure.Add(retryFor + timeout + slack)
	var firstDrop time.Time
	for time.Now().Before(deadline) && tr.DroppedReconciles() < n {
		if firstDrop.IsZero() && tr.DroppedReconciles() > 0 {
			firstDrop = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	if firstDrop.IsZero() && tr.DroppedReconciles() > 0 {
		firstDrop = time.Now()
	}
	t.Logf("%d dropped %v after the last first failure", tr.DroppedReconciles(), time.Since(lastFirstFailure))
	assert.Equal(t, int64(n), tr.DroppedReconciles(), "dropped and counted %v after the last first failure", time.Since(lastFirstFailure))
	assert.Equal(t, int64(n), tr.FailOpens())
	require.False(t, firstDrop.IsZero())
	assert.GreaterOrEqual(t, firstDrop.Sub(start), retryFor, "none is dropped before it was retried for its whole time")
	assert.Greater(t, s.calls.Load(), int64(2*n), "each was tried again")
	require.NoError(t, tr.Close(context.Background()))
}
