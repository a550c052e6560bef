package llmrate_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// priorityHeader carries the class in these tests.
const priorityHeader = "X-Priority"

// halfBatch is WithPriority keeping half of every bucket from class batch.
func halfBatch() llmrate.Option {
	return llmrate.WithPriority(llmrate.Header(priorityHeader), map[string]float64{"batch": 0.5})
}

// sendClass sends a request of key with an estimate of est tokens
// (Content-Length 4×est) and the given class header ("" : none), and more
// headers as name, value pairs.
func (h *harness) sendClass(key, class string, est int64, more ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
	r.ContentLength = 4 * est
	r.Header.Set("Authorization", "Bearer "+key)
	if class != "" {
		r.Header.Set(priorityHeader, class)
	}
	for i := 0; i+1 < len(more); i += 2 {
		r.Header.Set(more[i], more[i+1])
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

// burstClass sends requests of est tokens until the first refusal (at most
// max) and returns how many were admitted.
func (h *harness) burstClass(key, class string, est int64, max int, more ...string) int {
	h.t.Helper()
	for i := range max {
		if w := h.sendClass(key, class, est, more...); w.Code != http.StatusOK {
			require.Equal(h.t, http.StatusTooManyRequests, w.Code, w.Body.String())
			return i
		}
	}
	return max
}

func TestWithPriorityConfigErrors(t *testing.T) {
	t.Parallel()
	class := llmrate.Header(priorityHeader)
	for name, opt := range map[string]llmrate.Option{
		"nil extractor":       llmrate.WithPriority(nil, map[string]float64{"batch": 0.5}),
		"nil map":             llmrate.WithPriority(class, nil),
		"empty map":           llmrate.WithPriority(class, map[string]float64{}),
		"zero":                llmrate.WithPriority(class, map[string]float64{"batch": 0}),
		"one":                 llmrate.WithPriority(class, map[string]float64{"batch": 1}),
		"negative":            llmrate.WithPriority(class, map[string]float64{"batch": -0.1}),
		"above one":           llmrate.WithPriority(class, map[string]float64{"batch": 1.5}),
		"NaN":                 llmrate.WithPriority(class, map[string]float64{"batch": math.NaN()}),
		"infinity":            llmrate.WithPriority(class, map[string]float64{"batch": math.Inf(1)}),
		"rounds to 0":         llmrate.WithPriority(class, map[string]float64{"batch": 4e-7}),
		"rounds to 1,000,000": llmrate.WithPriority(class, map[string]float64{"batch": 0.9999996}),
		"empty name":          llmrate.WithPriority(class, map[string]float64{"": 0.5}),
		"one bad among good":  llmrate.WithPriority(class, map[string]float64{"batch": 0.5, "bulk": 2}),
	} {
		_, err := llmrate.New(opt)
		var ce *llmrate.ConfigError
		if assert.ErrorAs(t, err, &ce, name) {
			assert.Equal(t, "WithPriority", ce.Option, name)
		}
	}
	for _, r := range []float64{1e-6, 6e-7, 0.5, 0.999999, 0.9999994} {
		_, err := llmrate.New(llmrate.WithPriority(class, map[string]float64{"batch": r}))
		assert.NoError(t, err, "reserve %v: at least one millionth and below 1,000,000", r)
	}
}

// TestPriorityBatchGetsHalf: one key (its own workspace), 1,000 tokens per
// minute (a bucket of 2,000), 100-token requests. Class batch with reserve
// 0.5 takes exactly half the bucket, 10 requests, and is refused while
// the default class and a class not in the reserves take the rest.
func TestPriorityBatchGetsHalf(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000})),
		halfBatch(), llmrate.WithObserver(rec))
	assert.Equal(t, 10, h.burstClass("sk-1", "batch", 100, 30), "batch: 1,000 of 2,000 tokens")

	w := h.sendClass("sk-1", "batch", 100)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "6", w.Header().Get("Retry-After"), "from 1,000 to 1,100 at 1,000 per minute: 6 s")
	assert.Equal(t, "Rate limit reached for tokens per minute (key) on the free tier: limit 1000 per minute, burst 2000, of which 50% is kept for other traffic (priority class batch). Please try again in 6s.",
		decodeErr(t, w).Error.Message)

	assert.Equal(t, http.StatusOK, h.sendClass("sk-1", "", 100).Code, "interactive admitted while batch is refused")
	assert.Equal(t, http.StatusOK, h.sendClass("sk-1", "vip", 100).Code, "a class not in the reserves has none")
	assert.Equal(t, 8, h.burstClass("sk-1", "", 100, 30), "the default class: the rest, to the bottom")
	w = h.sendClass("sk-1", "", 100)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.NotContains(t, decodeErr(t, w).Error.Message, "kept for other traffic", "not refused by a reserve")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.decisions, 24)
	for i, e := range rec.decisions {
		want := ""
		if i <= 11 {
			want = "batch"
		}
		assert.Equal(t, want, e.Class, "decision %d: DecisionEvent.Class (a listed class only; vip is not listed)", i)
	}
}

func TestPriorityClassOfExtractorError(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	failing := func(r *http.Request) (string, error) { return "batch", errors.New("no class") }
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000})),
		llmrate.WithPriority(failing, map[string]float64{"batch": 0.5}), llmrate.WithObserver(rec))
	assert.Equal(t, 20, h.burstClass("sk-1", "", 100, 30), "an extractor error: no reserve, the whole bucket")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.decisions {
		assert.Empty(t, e.Class, "no class reported on an extractor error")
	}
}

func TestPriorityClassExtractorPanicFailsOpen(t *testing.T) {
	t.Parallel()
	panicking := func(*http.Request) (string, error) { panic("boom") }
	h := newHarness(t, okHandler, llmrate.WithPriority(panicking, map[string]float64{"batch": 0.5}))
	assert.Equal(t, http.StatusOK, h.sendClass("sk-1", "batch", 1).Code)
	assert.Equal(t, int64(1), h.lim.FailOpens(), "a panicking extractor is a fault, as the others")
}

// TestPriorityMapCopied: changing the map after New changes nothing.
func TestPriorityMapCopied(t *testing.T) {
	t.Parallel()
	reserves := map[string]float64{"batch": 0.5}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000})),
		llmrate.WithPriority(llmrate.Header(priorityHeader), reserves))
	reserves["batch"] = 0.9
	reserves["bulk"] = 0.9
	assert.Equal(t, 10, h.burstClass("sk-1", "batch", 100, 30), "still one half")
	assert.Equal(t, 10, h.burstClass("sk-1", "bulk", 100, 30), "bulk added later: no reserve")
}

// TestPriorityWorkspace: two keys of one workspace (figures of its own,
// by override); the batch key stops at the workspace's floor, the other
// key spends the rest.
func TestPriorityWorkspaceOverride(t *testing.T) {
	t.Parallel()
	over := llmrate.OverrideResolverFunc(func(_ context.Context, ws string) (llmrate.Limits, bool) {
		return llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000}, ws == "acme"
	})
	h := newHarness(t, okHandler, llmrate.WithWorkspace(wsFromHeader), llmrate.WithOverrides(over), halfBatch())
	assert.Equal(t, 10, h.burstClass("k1", "batch", 100, 30, "X-WS", "acme"), "batch: half the workspace's bucket")
	w := h.sendClass("k1", "batch", 100, "X-WS", "acme")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, decodeErr(t, w).Error.Message, "under this workspace's own limits: limit 1000 per minute, burst 2000, of which 50% is kept for other traffic (priority class batch).")
	assert.Equal(t, 10, h.burstClass("k2", "", 100, 30, "X-WS", "acme"), "another key, no class: the rest")
}

func TestPriorityModelEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler, llmrate.WithModel(modelHeaderExtractor),
		llmrate.WithModelLimits(llmrate.ModelLimits{"o3": uniform(llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000})}), halfBatch())
	assert.Equal(t, 10, h.burstClass("sk-1", "batch", 100, 30, "X-Model", "o3"), "batch: half of o3's bucket")
	w := h.sendClass("sk-1", "batch", 100, "X-Model", "o3")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, decodeErr(t, w).Error.Message, "Rate limit reached for o3 for this API key on tokens per minute on the free tier: limit 1000 per minute, burst 2000, of which 50% is kept for other traffic (priority class batch).")
	assert.Equal(t, 10, h.burstClass("sk-1", "", 100, 30, "X-Model", "o3"), "the default class: the rest of o3's")
}

func TestPriorityWindow(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 100_000, TokensPerMinute: 10_000_000, Windows: []llmrate.Window{{Per: time.Hour, Tokens: 1000}}}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(lim)), halfBatch())
	assert.Equal(t, 5, h.burstClass("sk-1", "batch", 100, 30), "batch: half of the hour's 1,000 tokens")
	w := h.sendClass("sk-1", "batch", 100)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "360", w.Header().Get("Retry-After"), "100 tokens at 1,000 per hour")
	assert.Equal(t, "false", w.Header().Get(llmrate.HeaderShouldRetry))
	assert.Equal(t, "Rate limit reached for tokens per hour (key) on the free tier: limit 1000 per hour, of which 50% is kept for other traffic (priority class batch). Please try again in 360s.",
		decodeErr(t, w).Error.Message)
	assert.Equal(t, 5, h.burstClass("sk-1", "", 100, 30), "the default class: the rest")
}

func TestPriorityNeverFits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000})), halfBatch())
	w := h.sendClass("sk-1", "batch", 1001)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"))
	assert.Equal(t, "Request too large for tokens per minute (key): it needs 1001 tokens, more than the 1000 of the bucket's whole capacity of 2000 on the free tier that its class may use; 50% is kept for other traffic (priority class batch). Retrying will not help: send a smaller request or move to a larger tier.",
		decodeErr(t, w).Error.Message)
	assert.Equal(t, http.StatusOK, h.sendClass("sk-1", "batch", 1000).Code, "exactly what the reserve leaves")
	w = h.sendClass("sk-2", "batch", 2001)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, decodeErr(t, w).Error.Message, "exceed the bucket's whole capacity of 2000", "larger than the bucket itself: the usual message")
}

func TestPriorityGauge(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	})
	h := newHarness(t, slow, llmrate.WithTiers(capped(1000, 100_000, 4)), halfBatch())
	done := make(chan int, 4)
	for range 2 {
		go func() { done <- h.sendClass("sk-1", "batch", 1).Code }()
		<-started
	}
	w := h.sendClass("sk-1", "batch", 1)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "two of four in flight: the other two kept")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Contains(t, decodeErr(t, w).Error.Message, "limit 4 in flight at once, of which 50% is kept for other traffic (priority class batch).")
	for range 2 {
		go func() { done <- h.sendClass("sk-1", "", 1).Code }()
		<-started
	}
	w = h.sendClass("sk-1", "", 1)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "all four in flight")
	assert.NotContains(t, decodeErr(t, w).Error.Message, "kept for other traffic")
	close(release)
	for range 4 {
		assert.Equal(t, http.StatusOK, <-done)
	}
}

func TestPriorityShadow(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000})),
		halfBatch(), llmrate.WithShadow(), llmrate.WithObserver(rec))
	for range 12 {
		require.Equal(t, http.StatusOK, h.sendClass("sk-1", "batch", 100).Code, "shadow mode lets everything through")
	}
	assert.Equal(t, int64(2), h.lim.ShadowRefusals(), "the 11th and 12th would have been refused by the reserve")
	for range 10 {
		h.sendClass("sk-1", "", 100)
	}
	assert.Equal(t, int64(2), h.lim.ShadowRefusals(), "the default class: the rest, as enforcement would leave it")
	h.sendClass("sk-1", "", 100)
	assert.Equal(t, int64(3), h.lim.ShadowRefusals())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	e := rec.decisions[10]
	assert.False(t, e.Allowed)
	assert.True(t, e.Shadow)
	assert.Equal(t, "batch", e.Class)
	assert.Equal(t, 6*time.Second, e.RetryAfter)
}

// TestPriorityMaxWait: 1,000 tokens per minute (a bucket of 2,000, a
// floor of 1,000 at one half, 100 tokens back every 6 s) and WithMaxWait
// of 60 s. The batch class spends its 1,000 (ten requests of 100); each
// of the next ten 100-token batch requests is refused, not granted a
// wait below the floor (a reservation is debited at admission), with
// Retry-After 6 (100 tokens above the floor) and nothing debited; so an
// unclassed request of 1,000 tokens, exactly the reserve, fits at once.
// (This test once asserted the batch class waited 10 ms with the bucket
// already at the floor: a debit below it.)
func TestPriorityMaxWait(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000})),
		halfBatch(), llmrate.WithMaxWait(60*time.Second), llmrate.WithObserver(rec))
	for i := range 10 {
		require.Equal(t, http.StatusOK, h.sendClass("sk-1", "batch", 100).Code, "batch request %d: down to the floor", i+1)
	}
	for i := range 10 {
		w := h.sendClass("sk-1", "batch", 100)
		require.Equal(t, http.StatusTooManyRequests, w.Code, "batch request %d past the floor: refused, not held below it", i+11)
		assert.Equal(t, "6", w.Header().Get("Retry-After"), "from 1,000 to 1,100 at 1,000 a minute")
		assert.Contains(t, decodeErr(t, w).Error.Message, "kept for other traffic (priority class batch)")
	}
	require.Equal(t, http.StatusOK, h.sendClass("sk-1", "", 1000).Code, "no reserve: the reserve is all there")
	w := h.sendClass("sk-1", "batch", 1)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the bucket is empty")
	assert.Equal(t, "60", w.Header().Get("Retry-After"), "1,001 tokens at 1,000 a minute: 60.06 s, capped at 60")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.decisions, 22)
	for i, e := range rec.decisions {
		assert.Equal(t, time.Duration(0), e.Wait, "decision %d: nothing waits", i)
	}
}

// BenchmarkAdmitReservedHotKey: BenchmarkAdmitHotKey's admission with a
// priority reserve of one half (AdmitRequest.Reserve): the staged path
// with a floor per bucket.
func BenchmarkAdmitReservedHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	req.Reserve = 500_000
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		if d, _ := s.Admit(ctx, req); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// benchPriority is BenchmarkMiddleware with WithPriority, each request
// carrying the given class header ("": none).
func benchPriority(b *testing.B, class string) {
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	l, err := llmrate.New(llmrate.WithTiers(uniform(huge)), halfBatch())
	if err != nil {
		b.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(oneKBResponse)
	})
	h := l.Middleware(next)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer sk-bench")
	if class != "" {
		r.Header.Set(priorityHeader, class)
	}
	r.ContentLength = 400
	w := &reusableWriter{h: http.Header{}}
	b.ReportAllocs()
	for range b.N {
		h.ServeHTTP(w, r)
	}
}

// BenchmarkMiddlewarePriority: a request of a class with a reserve.
func BenchmarkMiddlewarePriority(b *testing.B) { benchPriority(b, "batch") }

// BenchmarkMiddlewarePriorityNoClass: WithPriority on, a request without
// a class (no reserve): the class extractor's cost alone.
func BenchmarkMiddlewarePriorityNoClass(b *testing.B) { benchPriority(b, "") }

// TestMemoryStoreReserveAboveMax: a Reserve above MaxReserve is decided as
// MaxReserve. At 999,999 millionths a bucket of 2,000,000 keeps
// ⌈1,999,998⌉: a request of 2 tokens fits a full bucket, one of 3 never.
func TestMemoryStoreReserveAboveMax(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000}
	for _, r := range []int64{llmrate.MaxReserve, 1_000_000, 5_000_000} {
		s := llmrate.NewMemoryStore()
		req := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 3, Reserve: r, Now: time.Unix(1, 0)}
		d, err := s.Admit(context.Background(), req)
		require.NoError(t, err)
		assert.True(t, d.NeverFits, "reserve %d: 3 tokens above a floor of 1,999,998 never fit", r)
		req.Tokens = 2
		d, err = s.Admit(context.Background(), req)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "reserve %d: 2 tokens fit exactly", r)

		// A gauge of 2,000,000 keeps 1,999,998 slots free: two are taken.
		g := lim
		g.ConcurrentRequests = 2_000_000
		req = llmrate.AdmitRequest{Key: "k", Workspace: "ws2", KeyLimits: g, WorkspaceLimits: g, Tokens: 1, Reserve: r, Now: time.Unix(1, 0)}
		for i, id := range []string{"a1", "a2"} {
			req.ID = id
			d, err = s.Admit(context.Background(), req)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "reserve %d: slot %d of 2,000,000 with 1,999,998 kept", r, i+1)
		}
		req.ID = "a3"
		d, err = s.Admit(context.Background(), req)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "reserve %d: a third would leave 1,999,997", r)
		assert.True(t, d.ByReserve, "reserve %d", r)
	}
}

// TestPriorityMessageNamesThePerMinuteBucket: with a one-minute window
// beside the per-minute tokens bucket, a refusal by the per-minute
// bucket's floor is named as the per-minute bucket (it had room for the
// request, but not above its floor), not as the window.
func TestPriorityMessageNamesThePerMinuteBucket(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000, Windows: []llmrate.Window{{Per: time.Minute, Tokens: 5000}}}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(lim)), halfBatch())
	assert.Equal(t, 10, h.burstClass("sk-1", "batch", 100, 30), "the per-minute bucket's floor of 1,000 first")
	w := h.sendClass("sk-1", "batch", 100)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "Rate limit reached for tokens per minute (key) on the free tier: limit 1000 per minute, burst 2000, of which 50% is kept for other traffic (priority class batch). Please try again in 6s.",
		decodeErr(t, w).Error.Message)
}

// TestPriorityCalibrationNeverTurnsAFitIntoNeverFits: with a reserve, the
// calibrated estimate is held to what the reserve leaves of the smallest
// tokens bucket (2,000 − ⌈0.5 × 2,000⌉ = 1,000), so a request whose raw
// estimate fits there is admitted, not refused as never fitting.
func TestPriorityCalibrationNeverTurnsAFitIntoNeverFits(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(lim)), llmrate.WithCalibration(), llmrate.WithObserver(rec), halfBatch())
	for range 8 {
		calSend(t, h, rec, "", 10, 0, 40) // ratio 4, no class
	}
	require.Equal(t, 4.0, h.lim.Calibration()[""])
	h.clock.Advance(10 * time.Minute) // full again
	// Raw 600 fits the 1,000 the reserve leaves; scaled ×4 it would be 2,400.
	w := postBody(h.h, "sk-cal", strings.Repeat("x", 4*600), "X-In", "0", "X-Out", "600", priorityHeader, "batch")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	last := rec.decisions[len(rec.decisions)-1]
	assert.Equal(t, int64(1000), last.Estimate, "held to the capacity less the floor")
	assert.Equal(t, "batch", last.Class)
}
