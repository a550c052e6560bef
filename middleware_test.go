package llmrate_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

var free = llmrate.DefaultTiers().Free

// 1. The reference's worked example.
func TestWorkedExampleRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	assert.Equal(t, 200, h.burst("sk-one", 1000), "from a full bucket exactly 200 are admitted")

	w := h.send("sk-one", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.NotEmpty(t, w.Header().Get("X-Request-Id"))
	b := decodeErr(t, w)
	assert.Equal(t, "rate_limit_error", b.Error.Type)
	assert.Equal(t, "rate_limit_exceeded", b.Error.Code)
	assert.Nil(t, b.Error.Param)
	assert.Contains(t, b.Error.Message, "requests per minute (key)")
	assert.Contains(t, w.Body.String(), `"param":null`)

	h.clock.Advance(1200 * time.Millisecond)
	assert.Equal(t, 2, h.burst("sk-one", 10), "1.2 s later exactly two more")
}

// 2. The token dimension, with rollback and reconcile: the first request is
// still in flight (its provider has not answered) when the second arrives.
func TestWorkedExampleTokens(t *testing.T) {
	t.Parallel()
	answer := make(chan struct{})
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 1_200_000 {
			<-answer // hold the first response until the second was refused
			usageHandler(50_000, 0).ServeHTTP(w, r)
			return
		}
		usageHandler(-1, 0).ServeHTTP(w, r)
	})
	store := llmrate.NewMemoryStore()
	h := newHarness(t, provider, llmrate.WithStore(store))
	levels := func() [4]int64 { return store.Levels("sk-t", "sk-t", free, free, h.clock.Now()) }

	first := make(chan int)
	go func() { first <- h.send("sk-t", 1_200_000).Code }()
	require.Eventually(t, func() bool { return levels()[llmrate.KeyTokens] == 100_000 }, 5*time.Second, time.Millisecond,
		"estimate 300,000 is debited from 400,000")
	before := levels()
	assert.Equal(t, [4]int64{199, 100_000, 199, 100_000}, before)

	w := h.send("sk-t", 600_000)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "estimate 150,000 does not fit in 100,000")
	assert.Contains(t, decodeErr(t, w).Error.Message, "tokens per minute (key)")
	assert.Equal(t, before, levels(), "the refusal consumed nothing, its request debit included")

	close(answer)
	require.Equal(t, http.StatusOK, <-first)
	assert.Equal(t, int64(350_000), levels()[llmrate.KeyTokens], "reported 50,000: 250,000 credited back")
	require.Equal(t, http.StatusOK, h.send("sk-t", 600_000).Code, "the 150,000-token request then fits")
	assert.Equal(t, 198, h.burst("sk-t", 1000), "the whole remaining request allowance is still there")
}

// 3. Order and rollback: a refusal at each of the four stages leaves all
// four buckets of the refused key as they were, and those of another key
// of the workspace; two keys of one workspace exhaust it together.
func TestRollbackAtEveryStage(t *testing.T) {
	t.Parallel()
	store := llmrate.NewMemoryStore()
	now := newFakeClock().Now()                                         // fixed: no refill, so whole levels are the whole state
	key := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000} // buckets of 20 requests, 2,000 tokens
	ws := llmrate.Limits{RequestsPerMinute: 20, TokensPerMinute: 1500}  // buckets of 40 requests, 3,000 tokens
	admit := func(k string, n int64) llmrate.Decision {
		d, err := store.Admit(context.Background(), llmrate.AdmitRequest{Key: k, Workspace: "ws", KeyLimits: key, WorkspaceLimits: ws, Tokens: n, Now: now})
		require.NoError(t, err)
		return d
	}
	levels := func(k string) [4]int64 { return store.Levels(k, "ws", key, ws, now) }
	steps := []struct {
		stage string
		setup func() // admissions that bring the stage's bucket down; each must be admitted
		key   string
		n     int64
		want  llmrate.Bucket
	}{
		{"key requests", func() { // k1 spends its 20 requests: workspace 20 requests, 2,980 tokens left
			for range 20 {
				require.True(t, admit("k1", 1).Allowed)
			}
		}, "k1", 1, llmrate.KeyRequests},
		{"key tokens", func() { // k2 spends 1,990 of its 2,000 tokens: workspace 19 requests, 990 tokens left
			require.True(t, admit("k2", 1990).Allowed)
		}, "k2", 11, llmrate.KeyTokens},
		{"workspace tokens", func() {}, "k3", 991, llmrate.WorkspaceTokens}, // k3 has 2,000; the workspace 990
		{"workspace requests", func() { // k4 and k5 take the workspace's 19 remaining requests together
			for i := range 19 {
				require.True(t, admit(fmt.Sprintf("k%d", 4+i%2), 1).Allowed, "request %d of the workspace's last 19", i)
			}
		}, "k6", 1, llmrate.WorkspaceRequests},
	}
	for _, s := range steps {
		s.setup()
		before := [2][4]int64{levels(s.key), levels("k1")}
		d := admit(s.key, s.n)
		require.False(t, d.Allowed, s.stage)
		assert.Equal(t, s.want, d.Refused, s.stage)
		assert.Equal(t, before, [2][4]int64{levels(s.key), levels("k1")}, "%s: the refusal changed a bucket", s.stage)
	}
	assert.Equal(t, [4]int64{20, 2000, 0, 971}, levels("k6"), "k6 untouched; the workspace spent 40 requests and 2,029 tokens")
}

func TestTwoKeysExhaustWorkspaceThroughMiddleware(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler, llmrate.WithWorkspace(func(*http.Request) (string, error) { return "team", nil }))
	admitted := 0
	for i := range 400 {
		w := h.send([]string{"key-a", "key-b"}[i%2], 0)
		if w.Code == http.StatusOK {
			admitted++
		} else {
			assert.Contains(t, decodeErr(t, w).Error.Message, "requests per minute (workspace)")
		}
	}
	assert.Equal(t, 200, admitted, "each key at half the limit exhausts the workspace together")
}

// 4. Bucket arithmetic through the store.
func TestIdleHourComesBackExactlyFull(t *testing.T) {
	t.Parallel()
	store := llmrate.NewMemoryStore()
	h := newHarness(t, usageHandler(1_000_000, 0), llmrate.WithStore(store))
	require.Equal(t, http.StatusOK, h.send("sk-debt", 4).Code) // reports 1,000,000: bounded, debt
	lv := store.Levels("sk-debt", "sk-debt", free, free, h.clock.Now())
	assert.Equal(t, int64(400_000-800_000), lv[llmrate.KeyTokens], "reported usage bounded at 2×capacity puts the bucket in debt")
	h.clock.Advance(time.Hour)
	lv = store.Levels("sk-debt", "sk-debt", free, free, h.clock.Now())
	assert.Equal(t, [4]int64{200, 400_000, 200, 400_000}, lv, "an idle hour comes back exactly full")
	h2 := newHarness(t, okHandler, llmrate.WithStore(store), llmrate.WithClock(h.clock.Now))
	assert.Equal(t, 200, h2.burst("sk-debt", 1000), "200 admitted, not 201")
}

func TestBackwardsClockYieldsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	require.Equal(t, 200, h.burst("sk-b", 1000))
	h.clock.Advance(-time.Hour)
	assert.Equal(t, 0, h.burst("sk-b", 10), "going back in time refills nothing")
	h.clock.Advance(time.Hour + 600*time.Millisecond)
	assert.Equal(t, 1, h.burst("sk-b", 10), "refill resumes only past the latest time seen")
}

func TestHugeFiguresAndYears(t *testing.T) {
	t.Parallel()
	big := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	tt := llmrate.TierTable{Free: big, Developer: big, Team: big, Growth: big, Scale: big, Enterprise: big}
	store := llmrate.NewMemoryStore()
	h := newHarness(t, okHandler, llmrate.WithTiers(tt), llmrate.WithStore(store))
	require.Equal(t, http.StatusOK, h.send("sk-big", 4*2*llmrate.MaxPerMinute).Code, "the whole 2e12 burst in one request")
	assert.Equal(t, http.StatusTooManyRequests, h.send("sk-big", 4).Code)
	h.clock.Advance(60 * time.Nanosecond) // 1e12/min = 1000 per 60 ns
	lv := store.Levels("sk-big", "sk-big", big, big, h.clock.Now())
	assert.Equal(t, int64(1000), lv[llmrate.KeyTokens])
	h.clock.Advance(200 * 365 * 24 * time.Hour)
	lv = store.Levels("sk-big", "sk-big", big, big, h.clock.Now())
	assert.Equal(t, int64(2*llmrate.MaxPerMinute), lv[llmrate.KeyTokens], "two centuries later: exactly full, no overflow")
}

// 5. Retry-After.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	// tokens: drain to 0 with a 400,000-token request, then ask for 100,000
	require.Equal(t, http.StatusOK, h.send("sk-r", 1_600_000).Code)
	w := h.send("sk-r", 400_000) // 100,000 tokens at 200,000/min: 30 s
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "30", w.Header().Get("Retry-After"))
	h.clock.Advance(29*time.Second + 999*time.Millisecond)
	w = h.send("sk-r", 400_000)
	assert.Equal(t, "1", w.Header().Get("Retry-After"), "1 ms short rounds up to 1 s")
	h.clock.Advance(time.Millisecond)
	assert.Equal(t, http.StatusOK, h.send("sk-r", 400_000).Code, "fits exactly when Retry-After said")

	// A wait over a minute is clamped to 60.
	require.Equal(t, http.StatusOK, h.send("sk-r2", 1_600_000).Code)
	w = h.send("sk-r2", 1_600_000) // 400,000 at 200,000/min: 120 s
	assert.Equal(t, "60", w.Header().Get("Retry-After"))
}

func TestRequestLargerThanBucketNeverFits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	for range 3 {
		w := h.send("sk-big", 4*400_001)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "60", w.Header().Get("Retry-After"))
		assert.Contains(t, decodeErr(t, w).Error.Message, "Retrying will not help")
		h.clock.Advance(24 * time.Hour)
	}
	assert.Equal(t, 200, h.burst("sk-big", 1000), "the refusals cost nothing")
}

// 6. Estimate.
func TestEstimate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cl   int64
		want int64
	}{{-1, 1}, {0, 1}, {3, 1}, {4, 1}, {7, 1}, {8, 2}, {1_200_000, 300_000},
		{-1 << 63, 1}, {1 << 62, 1 << 60}, {1<<63 - 1, 2_305_843_009_213_693_951}} // (2^63-1)/4 = 2^61 - 1/4
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.ContentLength = c.cl
		assert.Equal(t, c.want, llmrate.EstimateTokens(r), "Content-Length %d", c.cl)
	}
	// chunked: no declared length through a real server
	var got, declared atomic.Int64
	est := func(r *http.Request) int64 {
		declared.Store(r.ContentLength)
		v := llmrate.EstimateTokens(r)
		got.Store(v)
		return v
	}
	l, err := llmrate.New(llmrate.WithEstimator(est))
	require.NoError(t, err)
	srv := httptest.NewServer(l.Middleware(okHandler))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.MultiReader(strings.NewReader(strings.Repeat("x", 100000))))
	req.Header.Set("Authorization", "Bearer sk-chunk")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, int64(-1), declared.Load(), "the server saw no declared length")
	assert.Equal(t, int64(1), got.Load(), "chunked → floor of 1")

	// A custom estimator is respected; below 1 counts as 1.
	store := llmrate.NewMemoryStore()
	h := newHarness(t, okHandler, llmrate.WithStore(store), llmrate.WithEstimator(func(*http.Request) int64 { return 1234 }))
	require.Equal(t, http.StatusOK, h.send("sk-e", 0).Code)
	assert.Equal(t, int64(400_000-1234), store.Levels("sk-e", "sk-e", free, free, h.clock.Now())[llmrate.KeyTokens])
	h = newHarness(t, okHandler, llmrate.WithStore(store), llmrate.WithEstimator(func(*http.Request) int64 { return -5 }))
	require.Equal(t, http.StatusOK, h.send("sk-neg", 0).Code)
	assert.Equal(t, int64(400_000-1), store.Levels("sk-neg", "sk-neg", free, free, h.clock.Now())[llmrate.KeyTokens])
}

// 7. Tiers.
func TestTiers(t *testing.T) {
	t.Parallel()
	d := llmrate.DefaultTiers()
	want := map[llmrate.Tier]llmrate.Limits{
		llmrate.Free:       {RequestsPerMinute: 100, TokensPerMinute: 200_000},
		llmrate.Developer:  {RequestsPerMinute: 1000, TokensPerMinute: 2_000_000},
		llmrate.Team:       {RequestsPerMinute: 1000, TokensPerMinute: 2_000_000},
		llmrate.Growth:     {RequestsPerMinute: 5000, TokensPerMinute: 10_000_000},
		llmrate.Scale:      {RequestsPerMinute: 20_000, TokensPerMinute: 40_000_000},
		llmrate.Enterprise: {RequestsPerMinute: 50_000, TokensPerMinute: 100_000_000},
	}
	for tier, lim := range want {
		assert.Equal(t, lim, d.For(tier), tier.String())
		p, err := llmrate.ParseTier(strings.ToUpper(tier.String()))
		require.NoError(t, err)
		assert.Equal(t, tier, p)
	}
	_, err := llmrate.ParseTier("platinum")
	assert.Error(t, err)
	assert.Equal(t, "tier(9)", llmrate.Tier(9).String())
	assert.Equal(t, d.Free, d.For(llmrate.Tier(9)), "out of range → Free")
}

func TestUnknownWorkspaceIsFreeEnterpriseEnforced(t *testing.T) {
	t.Parallel()
	res := llmrate.StaticTiers{"sk-ent": llmrate.Enterprise, "sk-growth": llmrate.Growth}
	store := llmrate.NewMemoryStore()
	h := newHarness(t, okHandler, llmrate.WithTierResolver(res), llmrate.WithStore(store))
	assert.Equal(t, 200, h.burst("sk-unknown", 1000), "unknown → Free")
	for key, tier := range map[string]llmrate.Tier{"sk-growth": llmrate.Growth, "sk-ent": llmrate.Enterprise} {
		lim := llmrate.DefaultTiers().For(tier)
		// Half the token burst per request: exactly two fit, the third is refused.
		cl := 4 * lim.TokensPerMinute
		assert.Equal(t, http.StatusOK, h.send(key, cl).Code, tier.String())
		assert.Equal(t, http.StatusOK, h.send(key, cl).Code, tier.String())
		w := h.send(key, cl)
		assert.Equal(t, http.StatusTooManyRequests, w.Code, "%s is enforced", tier)
		assert.Contains(t, decodeErr(t, w).Error.Message, "on the "+tier.String()+" tier")
		lv := store.Levels(key, key, lim, lim, h.clock.Now())
		assert.Equal(t, [4]int64{2*lim.RequestsPerMinute - 2, 0, 2*lim.RequestsPerMinute - 2, 0}, lv, tier.String())
	}
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	bad := llmrate.DefaultTiers()
	bad.Scale.TokensPerMinute = 0
	_, err := llmrate.New(llmrate.WithTiers(bad), llmrate.WithClock(nil), llmrate.WithStoreTimeout(-1))
	require.Error(t, err)
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "tier scale")
	assert.Contains(t, err.Error(), "WithClock")
	assert.Contains(t, err.Error(), "WithStoreTimeout")
	assert.Panics(t, func() { llmrate.Middleware(llmrate.WithStore(nil)) })
	bad = llmrate.DefaultTiers()
	bad.Free.RequestsPerMinute = llmrate.MaxPerMinute + 1
	_, err = llmrate.New(llmrate.WithTiers(bad))
	assert.ErrorContains(t, err, "out of range")
}

// 8. Limits endpoint.
func TestLimitsEndpoint(t *testing.T) {
	t.Parallel()
	l, err := llmrate.New(llmrate.WithTierResolver(llmrate.StaticTiers{"sk-ent": llmrate.Enterprise, "sk-team": llmrate.Team}))
	require.NoError(t, err)
	get := func(method, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/platform/v1/limits", nil)
		if key != "" {
			r.Header.Set("x-api-key", key)
		}
		w := httptest.NewRecorder()
		l.LimitsHandler().ServeHTTP(w, r)
		return w
	}
	w := get(http.MethodGet, "sk-any")
	require.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{"tier":"free","requestsPerMin":100,"tokensPerMin":200000}`, w.Body.String())
	w = get(http.MethodGet, "sk-team")
	assert.JSONEq(t, `{"tier":"team","requestsPerMin":1000,"tokensPerMin":2000000}`, w.Body.String())
	w = get(http.MethodGet, "sk-ent")
	assert.JSONEq(t, `{"tier":"enterprise","requestsPerMin":null,"tokensPerMin":null,"note":"Limits on this plan are set in your agreement."}`, w.Body.String())
	w = get(http.MethodPost, "")
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code, "405 is checked before identity")
	assert.Equal(t, "GET, HEAD", w.Header().Get("Allow"))
	w = get(http.MethodGet, "")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, "missing_api_key", decodeErr(t, w).Error.Code)
}

// 9. Faults fail open; a missing key is a 401.
func TestFaultsFailOpen(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"error", "hang", "ignore-ctx", "panic", "resolver-panic", "estimator-panic", "extractor-panic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.DebugLevel)
			fs := &faultStore{mode: mode, release: make(chan struct{})}
			t.Cleanup(func() { close(fs.release) })
			opts := []llmrate.Option{llmrate.WithLogger(zap.New(core)), llmrate.WithStoreTimeout(20 * time.Millisecond), llmrate.WithStore(fs)}
			switch mode {
			case "resolver-panic":
				opts = append(opts, llmrate.WithTierResolver(llmrate.TierResolverFunc(func(context.Context, string) (llmrate.Tier, bool) { panic("resolver") })))
			case "estimator-panic":
				opts = append(opts, llmrate.WithEstimator(func(*http.Request) int64 { panic("estimator") }))
			case "extractor-panic":
				opts = append(opts, llmrate.WithWorkspace(func(*http.Request) (string, error) { panic("extractor") }))
			}
			h := newHarness(t, okHandler, opts...)
			start := time.Now()
			w := h.send("sk-secret-raw-key-123", 10)
			assert.Less(t, time.Since(start), 5*time.Second, "bounded by the store timeout")
			assert.Equal(t, http.StatusOK, w.Code, "the request passes through")
			assert.Equal(t, int64(1), h.lim.FailOpens(), "the miss is counted")
			require.Equal(t, 1, logs.FilterMessage("llmrate: failing open").Len(), "the miss is logged")
			for _, e := range logs.All() {
				assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), "sk-secret-raw-key-123", "raw key in a log line")
				assert.Equal(t, llmrate.Fingerprint("sk-secret-raw-key-123"), e.ContextMap()["key_fp"])
			}
		})
	}
}

func TestMissingKey401(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	for _, auth := range []string{"", "Basic abc", "Bearer ", "Bearer a b", "Bearer \x01x"} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusUnauthorized, w.Code, "%q", auth)
		b := decodeErr(t, w)
		assert.Equal(t, "missing_api_key", b.Error.Code)
		assert.Equal(t, "invalid_request_error", b.Error.Type)
	}
}

// 10. Concurrency.
func TestConcurrentBurstExactly200(t *testing.T) {
	t.Parallel()
	for round := range 10 {
		h := newHarness(t, okHandler)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 250 {
			wg.Go(func() {
				<-start
				if h.send("sk-conc", 40).Code == http.StatusOK {
					admitted.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int64(200), admitted.Load(), "round %d", round)
	}
}

// 11. A provider's own 429 passes through untouched.
func TestProvider429Untouched(t *testing.T) {
	t.Parallel()
	body := `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "17")
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, body)
	})
	h := newHarness(t, provider)
	w := h.send("sk-p", 0)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "17", w.Header().Get("Retry-After"))
	assert.Equal(t, "0", w.Header().Get("X-Ratelimit-Remaining-Requests"))
	assert.Empty(t, w.Header().Get("X-Request-Id"), "nothing added to the upstream response")
	assert.Equal(t, body, w.Body.String())
}

// 12. Streaming is not harmed.
func TestStreamingFlushReachesClientImmediately(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	var ifaces string
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, isF := w.(http.Flusher)
		_, isH := w.(http.Hijacker)
		_, isR := w.(io.ReaderFrom)
		ifaces = fmt.Sprint(isF, isH, isR)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"one\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-second: // the client saw event one before we write event two
		case <-time.After(10 * time.Second):
			t.Error("the first event never reached the client")
			return
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n\ndata: [DONE]\n\n")
	})
	l, err := llmrate.New()
	require.NoError(t, err)
	srv := httptest.NewServer(l.Middleware(provider))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer sk-stream")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, line, `"one"`)
	close(second)
	rest, _ := io.ReadAll(br)
	assert.Contains(t, string(rest), "[DONE]")
	assert.Equal(t, "true true true", ifaces, "Flusher, Hijacker and ReaderFrom are preserved")
}

func TestHijackPreserved(t *testing.T) {
	t.Parallel()
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		_ = rw.Flush()
	})
	l, err := llmrate.New()
	require.NoError(t, err)
	srv := httptest.NewServer(l.Middleware(provider))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-h\r\n\r\n")
	b, _ := io.ReadAll(c)
	assert.True(t, strings.HasSuffix(string(b), "ok"), string(b))
}

// charged serves body as a provider would (cut after it, with a handler
// panic, when cut is set) through a limiter and returns the reconcile.
func charged(t *testing.T, ct, ce string, status int, body []byte, cut bool, contentLength int64) llmrate.ReconcileEvent {
	t.Helper()
	obs := &recorder{}
	provider := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		if ce != "" {
			w.Header().Set("Content-Encoding", ce)
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
		if cut {
			panic(http.ErrAbortHandler)
		}
	})
	h := newHarness(t, provider, llmrate.WithObserver(obs))
	func() {
		defer func() {
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				panic(p)
			}
		}()
		h.send("sk-charge", contentLength)
	}()
	ev, n := obs.lastReconcile()
	require.Equal(t, 1, n)
	return ev
}

// TestChargeIssueNumbers reproduces the review's numbers: a 492 KB
// completed OpenAI stream without usage (estimate 1,000) was charged 1,000,
// and the same stream cut 3 bytes early 124,002 (estimate + every byte ÷
// 4); an Anthropic stream cut after message_start was charged input + 1.
// Both now pay for the text they generated, and the cut never pays more.
func TestChargeIssueNumbers(t *testing.T) {
	t.Parallel()
	const word = " token" // each event's generated text
	event := `data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"` + word + `"},"finish_reason":null}]}` + "\n\n"
	var stream []byte
	events := 0
	for len(stream) < 492_000 {
		stream = append(stream, event...)
		events++
	}
	stream = append(stream, "data: [DONE]\n\n"...)
	text := int64(events * len(word))

	complete := charged(t, "text/event-stream", "", 200, stream, false, 4000)
	assert.Equal(t, llmrate.ReconcileEstimated, complete.Kind)
	assert.Equal(t, 1000+text/4, complete.Actual, "estimate + generated text ÷ 4 (was 1,000)")
	assert.Equal(t, text, complete.GeneratedBytes)

	cut := charged(t, "text/event-stream", "", 200, stream[:len(stream)-3], false, 4000)
	assert.True(t, cut.Cut)
	assert.Equal(t, 1000+text/4, cut.Actual, "the same text, not the framing (was 124,002)")
	assert.LessOrEqual(t, cut.Actual, complete.Actual)

	midEvent := charged(t, "text/event-stream", "", 200, stream[:len(stream)-len("data: [DONE]\n\n")-10], false, 4000)
	assert.Equal(t, 1000+(text-int64(len(word)))/4, midEvent.Actual, "the event cut in half counts nothing")

	// Anthropic: message_start (input 412, output 1), then text deltas, cut
	// before message_delta.
	anthropic := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":412,\"output_tokens\":1}}}\n\n")
	var atext int64
	for i := range 2000 {
		chunk := fmt.Sprintf("chunk %d of a long answer. ", i)
		atext += int64(len(chunk))
		anthropic = append(anthropic, fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", chunk)...)
	}
	ev := charged(t, "text/event-stream", "", 200, anthropic, true, 4000)
	assert.Equal(t, llmrate.ReconcilePartial, ev.Kind)
	assert.Equal(t, 412+atext/4, ev.Actual, "input + the text streamed (was input + 1)")
}

// TestChargeFramingNotText: a stream of tiny deltas in heavy SSE framing is
// charged by its text, not its bytes.
func TestChargeFramingNotText(t *testing.T) {
	t.Parallel()
	var b []byte
	for range 5000 {
		b = append(b, ": keep-alive\r\nevent: delta\r\nid: 123456789\r\ndata: {\"choices\":[{\"index\":0,\r\ndata: \"delta\":{\"content\":\"a\"}}]}\r\n\r\n"...)
	}
	ev := charged(t, "text/event-stream", "", 200, b, false, 400)
	assert.Equal(t, int64(100+5000/4), ev.Actual, "estimate 100 + 5,000 bytes of text ÷ 4, whatever the %d bytes of framing", len(b))
}

// TestChargeFixtures: every fixture whose usage is null or partial, served
// complete and cut at many points, is charged exactly what the rule gives
// over what encoding/json finds in its complete events; a cut never charges
// more than the complete response.
func TestChargeFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range loadFixtures(t) {
		body, err := os.ReadFile(filepath.Join(fixtureDir, f.File))
		require.NoError(t, err)
		decoded := body
		if f.ContentEncoding == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			require.NoError(t, err)
			decoded, err = io.ReadAll(zr)
			require.NoError(t, err)
		}
		ref := usageref.Body(f.ContentType, decoded)
		if f.Status == http.StatusNoContent {
			ref = usageref.Result{} // no body is read
		}
		if ref.Final && !ref.Pending {
			continue // final usage: TestFixturesThroughMiddleware
		}
		t.Run(f.File, func(t *testing.T) {
			t.Parallel()
			complete := charged(t, f.ContentType, f.ContentEncoding, f.Status, body, false, 4000)
			assert.Equal(t, ref.Charge(1000, false), complete.Actual, "complete (%s)", f.Note)
			if f.ContentEncoding != "" {
				return // a cut of compressed bytes has no plain prefix to compare with
			}
			r := rand.New(rand.NewPCG(uint64(len(body)), 9))
			for range 24 {
				k := r.IntN(len(body) + 1)
				ev := charged(t, f.ContentType, "", f.Status, body[:k], true, 4000)
				assert.Equal(t, usageref.Body(f.ContentType, body[:k]).Charge(1000, true), ev.Actual, "cut at %d (%s)", k, f.Note)
				assert.LessOrEqual(t, ev.Actual, complete.Actual, "cut at %d charges more than complete", k)
			}
		})
	}
}

// reusableWriter is a ResponseWriter reused across iterations.
type reusableWriter struct{ h http.Header }

func (w *reusableWriter) Header() http.Header         { return w.h }
func (w *reusableWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *reusableWriter) WriteHeader(int)             {}

var oneKBResponse = []byte(`{"id":"chatcmpl-abc123","object":"chat.completion","created":1732000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("word ", 150) + `","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":150,"total_tokens":169},"system_fingerprint":"fp_abc"}`)

// BenchmarkMiddleware: the whole per-request overhead (admit, wrap, scan a
// 1 KB OpenAI JSON response with usage, reconcile).
func BenchmarkMiddleware(b *testing.B) {
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	tt := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	l, _ := llmrate.New(llmrate.WithTiers(tt))
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(oneKBResponse)
	})
	h := l.Middleware(next)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer sk-bench")
	r.ContentLength = 400
	w := &reusableWriter{h: http.Header{}}
	b.ReportAllocs()
	for range b.N {
		h.ServeHTTP(w, r)
	}
}

// BenchmarkMiddlewareDailyWindow: BenchmarkMiddleware with one daily
// window (requests and tokens) on every tier: the windowed admission and
// its reconcile.
func BenchmarkMiddlewareDailyWindow(b *testing.B) {
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute,
		Windows: []llmrate.Window{{Per: 24 * time.Hour, Requests: llmrate.MaxPerMinute, Tokens: llmrate.MaxPerMinute}}}
	tt := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	l, err := llmrate.New(llmrate.WithTiers(tt))
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
	r.ContentLength = 400
	w := &reusableWriter{h: http.Header{}}
	b.ReportAllocs()
	for range b.N {
		h.ServeHTTP(w, r)
	}
}

// BenchmarkBareHandler: the same handler without the middleware.
func BenchmarkBareHandler(b *testing.B) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(oneKBResponse)
	})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	w := &reusableWriter{h: http.Header{}}
	b.ReportAllocs()
	for range b.N {
		next.ServeHTTP(w, r)
	}
}
