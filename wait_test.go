package llmrate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMaxWaitConfig(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-time.Nanosecond, llmrate.MaxRetryAfter + time.Nanosecond, time.Hour} {
		_, err := llmrate.New(llmrate.WithMaxWait(d))
		var ce *llmrate.ConfigError
		require.ErrorAs(t, err, &ce, "WithMaxWait(%v)", d)
		assert.Equal(t, "WithMaxWait", ce.Option)
	}
	for _, d := range []time.Duration{0, time.Millisecond, 60 * time.Second} {
		_, err := llmrate.New(llmrate.WithMaxWait(d))
		assert.NoError(t, err, "WithMaxWait(%v)", d)
	}
	_, err := llmrate.New(llmrate.WithMaxWaiters(0))
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "WithMaxWaiters", ce.Option)
}

// TestMemoryStoreReservations works the reservations of one key through by
// hand: 60 RPM and 6,000 TPM refill 1 request and 100 tokens a second; the
// buckets hold 120 and 12,000.
func TestMemoryStoreReservations(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 6000}
	now := time.Unix(1_700_000_000, 0)
	ctx := context.Background()
	for _, solo := range []bool{true, false} {
		s := llmrate.NewMemoryStore()
		admit := func(tokens int64, maxWait time.Duration) llmrate.Decision {
			t.Helper()
			d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Tokens: tokens,
				Solo: solo, Now: now, MaxWait: maxWait})
			require.NoError(t, err)
			return d
		}
		d := admit(12_000, 5*time.Second)
		require.True(t, d.Allowed)
		assert.Zero(t, d.Wait, "fits now: no wait (solo %v)", solo)

		d = admit(100, 5*time.Second)
		assert.True(t, d.Allowed, "100 tokens fit within 1 s")
		assert.Equal(t, time.Second, d.Wait, "100 tokens at 100/s")
		assert.Equal(t, int64(-100), d.Remaining[llmrate.KeyTokens], "debited now, below zero")
		assert.Zero(t, d.RetryAfter)

		d = admit(200, 5*time.Second)
		assert.True(t, d.Allowed)
		assert.Equal(t, 3*time.Second, d.Wait, "behind the first reservation: (100+200) at 100/s")
		assert.Equal(t, int64(-300), d.Remaining[llmrate.KeyTokens])

		d = admit(300, 5*time.Second)
		assert.False(t, d.Allowed, "600 tokens short: 6 s > 5 s")
		assert.Equal(t, llmrate.KeyTokens, d.Refused)
		assert.Equal(t, 6*time.Second, d.RetryAfter, "Retry-After counts the reservations ahead")
		assert.Zero(t, d.Wait)

		d = admit(20_000, 60*time.Second)
		assert.False(t, d.Allowed)
		assert.True(t, d.NeverFits, "larger than the bucket: no reservation however long")

		d = admit(300, 0)
		assert.False(t, d.Allowed, "MaxWait 0: no reservation")
		assert.Equal(t, 6*time.Second, d.RetryAfter)

		d = admit(5700, 60*time.Second)
		assert.True(t, d.Allowed, "6,000 short: exactly 60 s, the longest wait allowed")
		assert.Equal(t, 60*time.Second, d.Wait)
		d = admit(1, 60*time.Second)
		assert.False(t, d.Allowed, "60.01 s: past every MaxWait")
		assert.Equal(t, llmrate.MaxRetryAfter, d.RetryAfter)

		assert.Equal(t, [4]int64{116, -6000, 116, -6000}, s.Levels("k", "k", lim, lim, now), "four admitted, refusals debited nothing (solo %v)", solo)
	}
}

// TestMemoryStoreReservationGauge: a gauge without a free slot refuses a
// request that would have waited, at once and debiting nothing; a
// reservation holds its slot until its reconcile (a refund here).
func TestMemoryStoreReservationGauge(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 6000, ConcurrentRequests: 1}
	now := time.Unix(1_700_000_000, 0)
	ctx := context.Background()
	s := llmrate.NewMemoryStore()
	req := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 12_000, Now: now, MaxWait: 10 * time.Second, ID: "a1"}
	d, err := s.Admit(ctx, req)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, err = s.Admit(ctx, llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Now: now})
	assert.ErrorIs(t, err, llmrate.ErrNoAdmissionID, "a gauged admission needs an ID")
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Estimate: 12_000, Actual: 12_000, Now: now, ID: "a1"}))

	req.ID, req.Tokens = "a2", 500
	d, err = s.Admit(ctx, req)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 5*time.Second, d.Wait, "a reservation, holding the key's and the workspace's slot")
	before := s.Levels("k", "ws", lim, lim, now)
	req.ID, req.Tokens = "a3", 100
	d, err = s.Admit(ctx, req)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyConcurrent, d.Refused, "a gauge never waits")
	assert.Equal(t, 6*time.Second, d.RetryAfter, "the buckets' time to fit, which is over a second")
	assert.Equal(t, before, s.Levels("k", "ws", lim, lim, now), "nothing debited")

	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Estimate: 500, Now: now, ID: "a2", Refund: true}))
	assert.Equal(t, [4]int64{before[0] + 1, before[1] + 500, before[2] + 1, before[3] + 500}, s.Levels("k", "ws", lim, lim, now), "refunded in full")
	d, err = s.Admit(ctx, req)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the refund released the slot")
	assert.Equal(t, time.Second, d.Wait)
}

// drained returns a harness whose every key refills 100 tokens a
// millisecond (6,000,000 TPM) from empty after drain: a request of n tokens
// then waits n/100 ms.
func drained(t *testing.T, next http.Handler, opts ...llmrate.Option) *harness {
	t.Helper()
	h := newHarness(t, next, append([]llmrate.Option{llmrate.WithTiers(capped(1_000_000, 6_000_000, 0))}, opts...)...)
	return h
}

func (h *harness) drain(key string) {
	h.t.Helper()
	require.Equal(h.t, http.StatusOK, h.send(key, 4*12_000_000).Code, "the whole 12,000,000-token bucket")
}

// TestMaxWaitServesAfterTheWait: a request that fits within the max wait is
// admitted with a reservation, reported to the observer before it waits,
// held on a real timer for exactly the wait the clock computed, then
// served; a later one waits behind it.
func TestMaxWaitServesAfterTheWait(t *testing.T) {
	t.Parallel()
	obs := &decisions{}
	var served atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		okHandler.ServeHTTP(w, r)
	})
	h := drained(t, next, llmrate.WithMaxWait(time.Second), llmrate.WithObserver(obs))
	h.drain("sk-a")

	start := time.Now()
	w := h.send("sk-a", 4000) // 1,000 tokens: 10 ms
	elapsed := time.Since(start)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	ev := obs.last()
	assert.True(t, ev.Allowed)
	assert.Equal(t, 10*time.Millisecond, ev.Wait)
	assert.GreaterOrEqual(t, elapsed, 10*time.Millisecond, "held at least its wait before the handler")
	assert.Equal(t, int64(2), served.Load())

	require.Equal(t, http.StatusOK, h.send("sk-a", 4000).Code)
	assert.Equal(t, 20*time.Millisecond, obs.last().Wait, "behind the first reservation (the fake clock stood still)")

	w = h.send("sk-a", 4*100_000_000/1000) // 100,000 tokens: 1 s behind 2,000 more, past the max wait
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "2", w.Header().Get("Retry-After"), "1.02 s, counting the reservations ahead, rounded up")
	assert.Zero(t, h.lim.Waiting())
}

// TestMaxWaitClientLeaves: a client gone while it waits is refunded in full,
// its slot released, and the next handler never sees its request.
func TestMaxWaitClientLeaves(t *testing.T) {
	t.Parallel()
	obs := &decisions{}
	var served atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		okHandler.ServeHTTP(w, r)
	})
	store := llmrate.NewMemoryStore()
	lim := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 6_000_000, ConcurrentRequests: 1}
	h := newHarness(t, next, llmrate.WithTiers(uniform(lim)), llmrate.WithMaxWait(50*time.Second), llmrate.WithObserver(obs), llmrate.WithStore(store))
	h.drain("sk-a")
	before := store.Levels("sk-a", "sk-a", lim, lim, h.clock.Now())

	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		obs.mu.Lock()
		obs.onDecided = func(e llmrate.DecisionEvent) {
			if e.Wait > 0 {
				cancel() // the client leaves as soon as it is told to wait
			}
		}
		obs.mu.Unlock()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("")).WithContext(ctx)
		r.ContentLength = 4 * 3_000_000 // 30 s of refill
		r.Header.Set("Authorization", "Bearer sk-a")
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		cancel()
		ev := obs.last()
		require.True(t, ev.Allowed, "attempt %d: a reservation (not refused by the gauge: the slot came back)", i)
		assert.Equal(t, 30*time.Second, ev.Wait)
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, before, store.Levels("sk-a", "sk-a", lim, lim, h.clock.Now()), "attempt %d: refunded in full", i)
	}
	assert.Equal(t, int64(1), served.Load(), "only the drain reached the handler")
	assert.Zero(t, h.lim.Waiting())
	assert.Zero(t, h.lim.FailOpens())
}

// TestMaxWaitShadowNeverWaits: shadow mode debits the reservation as
// enforcement would but forwards at once.
func TestMaxWaitShadowNeverWaits(t *testing.T) {
	t.Parallel()
	obs := &decisions{}
	store := llmrate.NewMemoryStore()
	h := drained(t, okHandler, llmrate.WithMaxWait(50*time.Second), llmrate.WithShadow(), llmrate.WithObserver(obs), llmrate.WithStore(store))
	h.drain("sk-a")
	start := time.Now()
	require.Equal(t, http.StatusOK, h.send("sk-a", 4*3_000_000).Code)
	assert.Less(t, time.Since(start), 30*time.Second, "not held for its 30 s wait")
	ev := obs.last()
	assert.True(t, ev.Allowed && ev.Shadow)
	assert.Equal(t, 30*time.Second, ev.Wait)
	lim := capped(1_000_000, 6_000_000, 0).Free
	assert.Equal(t, int64(-3_000_000), store.Levels("sk-a", "sk-a", lim, lim, h.clock.Now())[llmrate.KeyTokens], "debited as enforcement would")
	assert.Zero(t, h.lim.Waiting())
}

// TestMaxWaitersBound: past WithMaxWaiters a request is decided as without
// a max wait.
func TestMaxWaitersBound(t *testing.T) {
	t.Parallel()
	obs := &decisions{}
	waiting := make(chan struct{}, 1)
	obs.onDecided = func(e llmrate.DecisionEvent) {
		if e.Wait > 0 {
			waiting <- struct{}{}
		}
	}
	h := drained(t, okHandler, llmrate.WithMaxWait(50*time.Second), llmrate.WithMaxWaiters(1), llmrate.WithObserver(obs))
	h.drain("sk-a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("")).WithContext(ctx)
		r.ContentLength = 4 * 100_000 // 1 s
		r.Header.Set("Authorization", "Bearer sk-a")
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		done <- w.Code
	}()
	<-waiting
	assert.Equal(t, int64(1), h.lim.Waiting())
	w := h.send("sk-c", 0)
	assert.Equal(t, http.StatusOK, w.Code, "a request that fits now needs no place")
	h.drain("sk-b")
	w = h.send("sk-b", 4)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "the one place is taken: refused as without a max wait")
	assert.False(t, obs.last().Allowed)
	cancel()
	assert.Equal(t, http.StatusTooManyRequests, <-done)
	assert.Zero(t, h.lim.Waiting())
	require.Equal(t, http.StatusOK, h.send("sk-b", 4).Code, "the place is free again")
}

// noReserveStore is a memory store that makes no reservations and has no
// gauges, and says so.
type noReserveStore struct {
	*llmrate.MemoryStore
	withWait atomic.Int64
}

func (s *noReserveStore) Admit(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	if r.KeyLimits.ConcurrentRequests > 0 {
		return llmrate.Decision{}, fmt.Errorf("no gauges: %w", errors.ErrUnsupported)
	}
	if r.MaxWait > 0 {
		s.withWait.Add(1)
		return llmrate.Decision{}, fmt.Errorf("no reservations: %w", errors.ErrUnsupported)
	}
	return s.MemoryStore.Admit(ctx, r)
}

// TestMaxWaitStoreWithoutReservations: a store that says it makes no
// reservations gets requests decided as without WithMaxWait (a 429, not a
// fail-open), and is asked once; a gauged request on a store without
// gauges fails open, counted.
func TestMaxWaitStoreWithoutReservations(t *testing.T) {
	t.Parallel()
	s := &noReserveStore{MemoryStore: llmrate.NewMemoryStore()}
	h := drained(t, okHandler, llmrate.WithMaxWait(time.Second), llmrate.WithStore(s))
	h.drain("sk-a")
	for range 3 {
		assert.Equal(t, http.StatusTooManyRequests, h.send("sk-a", 4000).Code, "refused as without a max wait")
	}
	assert.Equal(t, int64(1), s.withWait.Load(), "asked once")
	assert.Zero(t, h.lim.FailOpens())

	g := newHarness(t, okHandler, llmrate.WithStore(&noReserveStore{MemoryStore: llmrate.NewMemoryStore()}), llmrate.WithTiers(capped(100, 1000, 2)))
	assert.Equal(t, http.StatusOK, g.send("sk-a", 0).Code)
	assert.Equal(t, int64(1), g.lim.FailOpens(), "a store without gauges fails a gauged request open, counted")
}
