package llmrate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdStore admits everything and records reconciles by their Actual; the
// reconcile whose Actual is hold blocks (ignoring its context) until
// release is closed.
type holdStore struct {
	hold    int64
	started chan struct{} // receives once the held reconcile entered the store
	release chan struct{}

	mu      sync.Mutex
	applied map[int64]bool
}

func newHoldStore(hold int64) *holdStore {
	return &holdStore{hold: hold, started: make(chan struct{}, 16), release: make(chan struct{}), applied: map[int64]bool{}}
}

func (s *holdStore) Admit(context.Context, llmrate.AdmitRequest) (llmrate.Decision, error) {
	return llmrate.Decision{Allowed: true, Remaining: [4]int64{1, 1, 1, 1}}, nil
}

func (s *holdStore) Reconcile(_ context.Context, r llmrate.ReconcileRequest) error {
	if r.Actual == s.hold {
		s.started <- struct{}{}
		<-s.release
	}
	s.mu.Lock()
	s.applied[r.Actual] = true
	s.mu.Unlock()
	return nil
}

func (s *holdStore) wasApplied(actual int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[actual]
}

// TestReconcileQueueFullRunsInline: with the queue full, a reconcile is
// applied on the request's goroutine (never dropped, no goroutine of its
// own): its ServeHTTP returns only once the store has it, while an earlier
// queued one still waits.
func TestReconcileQueueFullRunsInline(t *testing.T) {
	t.Parallel()
	s := newHoldStore(101)
	h := newHarness(t, usageHandlerFromHeader(), llmrate.WithStore(s), llmrate.WithReconcileQueue(1), llmrate.WithStoreTimeout(10*time.Second))
	h.sendUsage("sk-q", 101) // its reconcile occupies the only worker
	<-s.started
	h.sendUsage("sk-q", 102) // queued
	assert.False(t, s.wasApplied(102))
	h.sendUsage("sk-q", 103) // queue full: applied before ServeHTTP returns
	assert.True(t, s.wasApplied(103), "applied inline")
	assert.False(t, s.wasApplied(102), "still queued behind the held one")
	close(s.release)
	require.NoError(t, h.lim.Close(context.Background()))
	for _, a := range []int64{101, 102, 103} {
		assert.True(t, s.wasApplied(a), "applied by Close: %d", a)
	}
	assert.Zero(t, h.lim.FailOpens())
}

// TestCloseReportsUnapplied: Close with a context already done stops the
// workers; the reconcile being applied fails at the store timeout, the
// queued one is not started; both are reported and counted.
func TestCloseReportsUnapplied(t *testing.T) {
	t.Parallel()
	s := newHoldStore(201)
	t.Cleanup(func() { close(s.release) })
	obs := &recorder{}
	h := newHarness(t, usageHandlerFromHeader(), llmrate.WithStore(s), llmrate.WithReconcileQueue(1),
		llmrate.WithStoreTimeout(50*time.Millisecond), llmrate.WithObserver(obs))
	h.sendUsage("sk-c", 201)
	<-s.started
	h.sendUsage("sk-c", 202)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := h.lim.Close(ctx)
	require.Error(t, err)
	assert.ErrorContains(t, err, "1 queued reconciles not applied")
	assert.ErrorContains(t, err, "1 reconciles failed while closing") // retried until Close's context ended
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(2), h.lim.FailOpens())
	assert.False(t, s.wasApplied(202))
	assert.NoError(t, h.lim.Close(context.Background()), "a second Close does nothing")
	// After Close, requests still work; their reconciles run inline.
	h.sendUsage("sk-c", 203)
	assert.True(t, s.wasApplied(203))
}

// closingStore records its Close.
type closingStore struct {
	holdStore
	closed int
	err    error
}

func (s *closingStore) Close(context.Context) error { s.closed++; return s.err }

func TestCloseClosesStore(t *testing.T) {
	t.Parallel()
	s := &closingStore{holdStore: *newHoldStore(-1), err: errors.New("boom")}
	l, err := llmrate.New(llmrate.WithStore(s))
	require.NoError(t, err)
	err = l.Close(context.Background())
	assert.ErrorContains(t, err, "boom")
	assert.Equal(t, 1, s.closed)
	assert.NoError(t, l.Close(context.Background()))
	assert.Equal(t, 1, s.closed, "closed once")
}

// TestStoreCallsBounded: a store that ignores its context parks one
// goroutine per call until it returns; past WithMaxStoreCalls calls in
// flight a request fails open at once with ErrStoreBusy, and once the store
// returns calls are made again.
func TestStoreCallsBounded(t *testing.T) {
	t.Parallel()
	fs := &faultStore{mode: "ignore-ctx", release: make(chan struct{})}
	obs := &recorder{}
	h := newHarness(t, okHandler, llmrate.WithStore(fs), llmrate.WithMaxStoreCalls(2),
		llmrate.WithStoreTimeout(5*time.Millisecond), llmrate.WithObserver(obs))
	for range 3 {
		assert.Equal(t, http.StatusOK, h.send("sk-b", 4).Code)
	}
	obs.mu.Lock()
	require.Len(t, obs.failOpens, 3)
	assert.ErrorIs(t, obs.failOpens[0].Err, llmrate.ErrStoreTimeout)
	assert.ErrorIs(t, obs.failOpens[1].Err, llmrate.ErrStoreTimeout)
	assert.ErrorIs(t, obs.failOpens[2].Err, llmrate.ErrStoreBusy, "third call not started")
	obs.mu.Unlock()
	close(fs.release) // the parked calls return and free their slots
	require.Eventually(t, func() bool {
		before := h.lim.FailOpens()
		h.send("sk-b", 4)
		return h.lim.FailOpens() == before
	}, 5*time.Second, time.Millisecond)
	_, err := llmrate.New(llmrate.WithMaxStoreCalls(0))
	assert.Error(t, err)
	_, err = llmrate.New(llmrate.WithReconcileQueue(-1))
	assert.Error(t, err)
}

// honouringStore declares it honours its context; it records the deadline
// it was given and can panic.
type honouringStore struct {
	holdStore
	panics   bool
	deadline time.Duration
}

func (s *honouringStore) HonoursContext() bool { return true }

func (s *honouringStore) Admit(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	if d, ok := ctx.Deadline(); ok {
		s.deadline = time.Until(d)
	}
	if s.panics {
		panic("store exploded")
	}
	return s.holdStore.Admit(ctx, r)
}

// TestDirectStoreCall: a store that honours its context is called with the
// store timeout as its deadline, and its panic still fails open.
func TestDirectStoreCall(t *testing.T) {
	t.Parallel()
	s := &honouringStore{holdStore: *newHoldStore(-1)}
	h := newHarness(t, okHandler, llmrate.WithStore(s), llmrate.WithStoreTimeout(time.Hour))
	require.Equal(t, http.StatusOK, h.send("sk-d", 4).Code)
	assert.Greater(t, s.deadline, 59*time.Minute)
	assert.Zero(t, h.lim.FailOpens())
	s.panics = true
	require.Equal(t, http.StatusOK, h.send("sk-d", 4).Code)
	assert.Equal(t, int64(1), h.lim.FailOpens())
}

// TestDirectStoreCallDeadlineRounded: with a store timeout of 50 ms, a
// store that honours its context sees a deadline 50 ms after its call was
// made, rounded up by at most a millisecond (the calls ending in the same
// millisecond share one timer), never later.
func TestDirectStoreCallDeadlineRounded(t *testing.T) {
	t.Parallel()
	s := &honouringStore{holdStore: *newHoldStore(-1)}
	h := newHarness(t, okHandler, llmrate.WithStore(s), llmrate.WithStoreTimeout(50*time.Millisecond))
	for range 20 {
		require.Equal(t, http.StatusOK, h.send("sk-r", 4).Code)
		assert.LessOrEqual(t, s.deadline, 51*time.Millisecond, "at most a millisecond past the timeout")
		assert.Greater(t, s.deadline, 30*time.Millisecond, "about the timeout after the call (scheduling aside)")
	}
	assert.Zero(t, h.lim.FailOpens())
}

// usageHandlerFromHeader reports the usage the request's X-Usage header
// asks for, as prompt tokens.
func usageHandlerFromHeader() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.Header.Get("X-Usage"), 10, 64)
		usageHandler(n, 0).ServeHTTP(w, r)
	})
}

// sendUsage sends a request with estimate 1 whose response reports usage.
func (h *harness) sendUsage(key string, usage int64) {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
	r.ContentLength = 4
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("X-Usage", strconv.FormatInt(usage, 10))
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	require.Equal(h.t, http.StatusOK, w.Code)
}
