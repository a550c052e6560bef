package llmrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingStore is the memory store behind a wrapper that counts every
// call made to it.
type countingStore struct {
	inner      llmrate.Store
	admits     atomic.Int64
	reconciles atomic.Int64
	fail       atomic.Bool // Admit answers an error (the request fails open)
}

func newCountingStore() *countingStore { return &countingStore{inner: llmrate.NewMemoryStore()} }

func (s *countingStore) Admit(ctx context.Context, req llmrate.AdmitRequest) (llmrate.Decision, error) {
	s.admits.Add(1)
	if s.fail.Load() {
		return llmrate.Decision{}, errors.New("connection refused")
	}
	return s.inner.Admit(ctx, req)
}

func (s *countingStore) Reconcile(ctx context.Context, req llmrate.ReconcileRequest) error {
	s.reconciles.Add(1)
	return s.inner.Reconcile(ctx, req)
}

func (s *countingStore) calls() (admits, reconciles int64) {
	return s.admits.Load(), s.reconciles.Load()
}

// sendWith sends one small request for key, with extra headers.
func (h *harness) sendWith(key string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
	r.Header.Set("Authorization", "Bearer "+key)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

// decodeJSON decodes a body into a generic value, to compare with one
// written out by hand.
func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

func TestMaxInFlightOption(t *testing.T) {
	t.Parallel()
	_, err := llmrate.New(llmrate.WithMaxInFlight(-1))
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "WithMaxInFlight", ce.Option)

	// 0 is the default: no cap, however many are in flight.
	g := newGate()
	h := newHarness(t, g, llmrate.WithMaxInFlight(0))
	h.inFlight(g, 20, "sk-a", "", "")
	assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	assert.Zero(t, h.lim.Shed())
}

// TestMaxInFlightShedsBeforeTheStore: past the cap a request gets the 503
// overloaded answer, or Anthropic's 529 when it carries anthropic-version,
// and the store is never called for it: nothing debited, nothing
// reconciled.
func TestMaxInFlightShedsBeforeTheStore(t *testing.T) {
	t.Parallel()
	st := newCountingStore()
	g := newGate()
	h := newHarness(t, g, llmrate.WithStore(st), llmrate.WithMaxInFlight(2))
	finish := h.inFlight(g, 2, "sk-a", "", "")
	admits, reconciles := st.calls()
	require.Equal(t, int64(2), admits)

	w := h.send("sk-a", 400)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.NotEmpty(t, w.Header().Get("X-Request-Id"))
	got := decodeJSON(t, w.Body.Bytes())
	msg, _ := got.(map[string]any)["error"].(map[string]any)["message"].(string)
	assert.Contains(t, msg, "not a rate limit")
	assert.Equal(t, map[string]any{"error": map[string]any{
		"message": msg, "type": "overloaded_error", "param": nil, "code": "overloaded",
	}}, got)

	w = h.sendWith("sk-b", map[string]string{"Anthropic-Version": "2023-06-01"})
	assert.Equal(t, 529, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Equal(t, map[string]any{"type": "error", "error": map[string]any{
		"type": "overloaded_error", "message": msg,
	}}, decodeJSON(t, w.Body.Bytes()))

	a2, r2 := st.calls()
	assert.Equal(t, admits, a2, "a shed request is never admitted")
	assert.Equal(t, reconciles, r2, "a shed request is never reconciled")
	assert.Equal(t, int64(2), h.lim.Shed())
	assert.Zero(t, h.lim.ShadowRefusals())

	// The two in flight end: their slots are free again.
	finish()
	assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	assert.Equal(t, http.StatusOK, h.sendWith("sk-b", map[string]string{"Anthropic-Version": "2023-06-01"}).Code)
	assert.Equal(t, int64(2), h.lim.Shed())
}

// TestMaxInFlightExactUnderConcurrency: of many requests arriving at once
// while none ends, exactly the cap's worth reach the handler and every
// other one is shed.
func TestMaxInFlightExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	const n, total = 3, 24
	var inside, most atomic.Int64
	rel := make(chan struct{})
	entered := make(chan struct{}, total)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := inside.Add(1)
		for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
		}
		entered <- struct{}{}
		<-rel
		inside.Add(-1)
		okHandler.ServeHTTP(w, r)
	})
	h := newHarness(t, next, llmrate.WithMaxInFlight(n))
	codes := make(chan int, total)
	var wg sync.WaitGroup
	for i := range total {
		wg.Go(func() { codes <- h.send("sk-"+string(rune('a'+i%4)), 0).Code })
	}
	// The shed ones end on their own; those inside wait for rel.
	count := map[int]int{}
	for range total - n {
		count[<-codes]++
	}
	for range n {
		<-entered
	}
	assert.Equal(t, map[int]int{http.StatusServiceUnavailable: total - n}, count)
	assert.Equal(t, int64(total-n), h.lim.Shed())
	close(rel)
	wg.Wait()
	for range n {
		assert.Equal(t, http.StatusOK, <-codes)
	}
	assert.Equal(t, int64(n), most.Load(), "at most the cap inside the handler at once")
}

// TestMaxInFlightSlotHeldUntilHandlerReturns: a slot is given back when
// the handler returns however it returns (normally, a panic, a hijacked
// connection), when the limiter answers the request itself (401, 429), and
// when the request fails open; and never before the handler returns.
func TestMaxInFlightSlotHeldUntilHandlerReturns(t *testing.T) {
	t.Parallel()
	mode := ""
	hold, entered := make(chan struct{}), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case "panic":
			panic(http.ErrAbortHandler)
		case "hijack":
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = c.Close()
			}
			return
		case "hold":
			close(entered)
			<-hold
		}
		okHandler.ServeHTTP(w, r)
	})
	st := newCountingStore()
	h := newHarness(t, next, llmrate.WithMaxInFlight(1), llmrate.WithTiers(capped(2, 100_000, 0)), llmrate.WithStore(st))
	serve := func(w http.ResponseWriter, key string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		defer func() { _ = recover() }()
		h.h.ServeHTTP(w, r)
	}
	endings := []struct {
		name string
		run  func()
	}{
		{"panic", func() { mode = "panic"; serve(httptest.NewRecorder(), "sk-panic") }},
		{"hijack", func() {
			mode = "hijack"
			c1, c2 := net.Pipe()
			serve(&hijackWriter{ResponseRecorder: httptest.NewRecorder(), conn: c1}, "sk-hijack")
			_ = c2.Close()
		}},
		{"401", func() {
			w := httptest.NewRecorder()
			serve(w, "")
			require.Equal(t, http.StatusUnauthorized, w.Code)
		}},
		{"429", func() {
			w := httptest.NewRecorder()
			serve(w, "sk-spent") // its 2 requests a minute, ×2 burst, are spent below
			require.Equal(t, http.StatusTooManyRequests, w.Code)
		}},
		{"fail open", func() {
			st.fail.Store(true)
			w := httptest.NewRecorder()
			serve(w, "sk-fault")
			st.fail.Store(false)
			require.Equal(t, http.StatusOK, w.Code)
		}},
	}
	for range 4 {
		mode = ""
		require.Equal(t, http.StatusOK, h.send("sk-spent", 0).Code)
	}
	for round := range 2 {
		for i, e := range endings {
			e.run()
			mode = ""
			require.Equal(t, http.StatusOK, h.send(fmt.Sprintf("sk-next-%d-%d", round, i), 0).Code, "round %d: the slot of a %s ending was given back", round, e.name)
		}
	}
	assert.Zero(t, h.lim.Shed())

	// Held while the handler runs: the next request is shed until it returns.
	mode = "hold"
	done := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		serve(w, "sk-hold")
		done <- w.Code
	}()
	<-entered
	for i := range 3 {
		assert.Equal(t, http.StatusServiceUnavailable, h.send("sk-other", 0).Code, "shed %d while the handler runs", i)
	}
	close(hold)
	assert.Equal(t, http.StatusOK, <-done)
	mode = ""
	assert.Equal(t, http.StatusOK, h.send("sk-after-hold", 0).Code)
}

// TestMaxInFlightShadow: in shadow mode a request past the cap passes to
// the next handler, counted by Shed, and is neither decided nor debited
// (no store call), as enforcement would have shed it before the store.
func TestMaxInFlightShadow(t *testing.T) {
	t.Parallel()
	st := newCountingStore()
	g := newGate()
	h := newHarness(t, g, llmrate.WithStore(st), llmrate.WithMaxInFlight(1), llmrate.WithShadow())
	finish := h.inFlight(g, 1, "sk-a", "", "")
	admits, _ := st.calls()
	require.Equal(t, int64(1), admits)

	codes := make(chan int, 1)
	go func() { codes <- h.send("sk-a", 400).Code }()
	<-g.entered // the would-be shed request reached the handler
	assert.Equal(t, http.StatusOK, <-codes)
	assert.Equal(t, int64(1), h.lim.Shed())
	assert.Zero(t, h.lim.ShadowRefusals())
	a2, r2 := st.calls()
	assert.Equal(t, int64(1), a2, "the passed request was not decided")
	assert.Zero(t, r2, "nor reconciled")

	// It held no slot: the one in flight still holds the only one.
	go func() { codes <- h.send("sk-b", 0).Code }()
	<-g.entered
	assert.Equal(t, http.StatusOK, <-codes)
	assert.Equal(t, int64(2), h.lim.Shed())
	finish()
	assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	assert.Equal(t, int64(2), h.lim.Shed())
}
