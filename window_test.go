package llmrate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// big per-minute figures, so that only the windows bind.
func windowsOnly(ws ...llmrate.Window) llmrate.Limits {
	return llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000, Windows: ws}
}

// 1,500 requests per day: all 1,500 at once, then one back every 57.6 s
// exactly (86,400 s / 1,500), never all at once at midnight.
func TestDailyQuotaRefillsContinuously(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(windowsOnly(llmrate.Window{Per: 24 * time.Hour, Requests: 1500}))),
		llmrate.WithObserver(rec))
	assert.Equal(t, 1500, h.burst("sk-day", 2000))
	w := h.send("sk-day", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "58", w.Header().Get("Retry-After"), "57.6 s, rounded up")
	assert.Empty(t, w.Header().Get(llmrate.HeaderShouldRetry), "a wait within 60 s is the SDKs' to retry")
	assert.Contains(t, w.Body.String(), "Rate limit reached for requests per day (key) on the free tier: limit 1500 per day. Please try again in 58s.")
	rec.mu.Lock()
	last := rec.decisions[len(rec.decisions)-1]
	rec.mu.Unlock()
	assert.Equal(t, llmrate.KeyRequests, last.Refused)
	assert.Equal(t, 24*time.Hour, last.Window)

	h.clock.Advance(57600*time.Millisecond - time.Nanosecond)
	assert.Equal(t, 0, h.burst("sk-day", 5), "one nanosecond short of the refill")
	h.clock.Advance(time.Nanosecond)
	assert.Equal(t, 1, h.burst("sk-day", 5), "exactly one back at 57.6 s")
	h.clock.Advance(24 * time.Hour)
	assert.Equal(t, 1500, h.burst("sk-day", 2000), "idle a day: exactly full, no 2× burst")
}

// A wait longer than a minute is told as it is, up to the window, with
// x-should-retry: false; the message names meter, window and scope.
func TestLongWindowRetryAfterAndShouldRetry(t *testing.T) {
	t.Parallel()
	ws := windowsOnly(llmrate.Window{Per: 24 * time.Hour, Requests: 2}, llmrate.Window{Per: 6 * time.Hour, Tokens: 1000})
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(ws)), llmrate.WithWorkspace(wsFromHeader))
	for range 2 {
		require.Equal(t, http.StatusOK, h.sendAs("k1", "team", "", 0).Code)
	}
	w := h.sendAs("k1", "team", "", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "43200", w.Header().Get("Retry-After"), "one request back in 12 h")
	assert.Equal(t, "false", w.Header().Get(llmrate.HeaderShouldRetry))
	assert.Contains(t, w.Body.String(), "requests per day (key)", "the key's own window is checked first")
	w = h.sendAs("k2", "team", "", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, w.Body.String(), "Rate limit reached for requests per day (workspace) on the free tier: limit 2 per day. Please try again in 43200s (at 2026-11-30T00:00:00Z).", "a wait past an hour states its end")

	h.clock.Advance(24 * time.Hour)
	// Tokens per 6 h: 1,000. 800 tokens, then 400 more does not fit: 200
	// short at 1,000 per 6 h is 72 min.
	require.Equal(t, http.StatusOK, h.sendAs("k3", "team", "", 4*800).Code)
	w = h.sendAs("k4", "team", "", 4*400)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "4320", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Body.String(), "tokens per 6h0m0s (workspace)")

	// Larger than the window itself: §6's never-fits answer.
	w = h.sendAs("k5", "team", "", 4*1001)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Body.String(), "Request too large for tokens per 6h0m0s (key)")
}

// usageWithCache reports an OpenAI usage with cached prompt tokens.
func usageWithCache(prompt, cached, completion int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			prompt, completion, prompt+completion, cached)
	})
}

// chatBody is a chat request whose prompt is n tokens by EstimateFromBody's
// count (4n bytes of text), asking for maxTokens.
func chatBody(n, maxTokens int64) string {
	return fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, strings.Repeat("a", int(4*n)))
}

func (h *harness) post(key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

// Anthropic's shape: input and output tokens per minute apart. Input is
// debited the prompt alone (not max_tokens) and charged the reported input
// less cache reads; output is debited nothing, admits while it holds 1,
// and is charged the reported output.
func TestInputAndOutputMeters(t *testing.T) {
	t.Parallel()
	lim := windowsOnly(llmrate.Window{Per: time.Minute, InputTokens: 1000, OutputTokens: 100})
	rec := &recorder{}
	h := newHarness(t, usageWithCache(300, 200, 150), llmrate.WithTiers(uniform(lim)), llmrate.WithEstimator(llmrate.EstimateFromBody()),
		llmrate.WithObserver(rec))
	// 100 prompt tokens and max_tokens 5,000: the input meter is debited
	// 100, not 5,100 (which would never fit 1,000).
	require.Equal(t, http.StatusOK, h.post("sk-a", chatBody(100, 5000)).Code)
	// Charged: input 300 − 200 cached = 100 (the estimate: no change);
	// output 150, from 100: 50 in debt.
	w := h.post("sk-a", chatBody(10, 5000))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, w.Body.String(), "output tokens per minute (key)")
	assert.Equal(t, "31", w.Header().Get("Retry-After"), "from −50 to 1 at 100 per minute: 30.6 s")
	rec.mu.Lock()
	last := rec.decisions[len(rec.decisions)-1]
	rec.mu.Unlock()
	assert.Equal(t, llmrate.KeyOutputTokens, last.Refused)
	assert.Equal(t, time.Minute, last.Window)

	h.clock.Advance(30600 * time.Millisecond)
	// Input is at 900 + 510 refilled, capped at 1,000: 1,001 never fits,
	// 1,000 does.
	w = h.post("sk-a", chatBody(1001, 0))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, w.Body.String(), "Request too large for input tokens per minute (key): its estimated 1001 input tokens exceed the window's whole capacity of 1000")
	require.Equal(t, http.StatusOK, h.post("sk-a", chatBody(1000, 0)).Code)
}

// The input meter is charged the reported input less cache reads: a
// cached prompt frees its input bucket.
func TestInputMeterChargedWithoutCacheReads(t *testing.T) {
	t.Parallel()
	lim := windowsOnly(llmrate.Window{Per: time.Minute, InputTokens: 1000})
	h := newHarness(t, usageWithCache(900, 850, 1), llmrate.WithTiers(uniform(lim)), llmrate.WithEstimator(llmrate.EstimateFromBody()))
	// Each request is estimated 900 input tokens and charged 50.
	for i := range 5 {
		require.Equal(t, http.StatusOK, h.post("sk-c", chatBody(900, 0)).Code, "request %d", i)
		h.clock.Advance(3 * time.Second) // 50 back
	}
	// Without cache reads counted: charged 900 each, the second is refused.
	h2 := newHarness(t, usageWithCache(900, 0, 1), llmrate.WithTiers(uniform(lim)), llmrate.WithEstimator(llmrate.EstimateFromBody()))
	require.Equal(t, http.StatusOK, h2.post("sk-c", chatBody(900, 0)).Code)
	h2.clock.Advance(3 * time.Second)
	w := h2.post("sk-c", chatBody(900, 0))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, w.Body.String(), "input tokens per minute (key)")
}

// A one-minute window's requests meter refuses under the window's own
// figure and message, not the per-minute bucket's.
func TestMinuteWindowBesideThePerMinuteFigures(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 100_000, Windows: []llmrate.Window{{Per: time.Minute, Requests: 3}}}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(lim)))
	assert.Equal(t, 3, h.burst("sk-m", 10), "the window holds its figure: no 2× burst")
	w := h.send("sk-m", 0)
	assert.Equal(t, "20", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Body.String(), "Rate limit reached for requests per minute (key) on the free tier: limit 3 per minute. Please")
}

// Key tiers under an override: windows pair by Per, each meter the
// tighter non-zero figure.
func TestOverrideWindowsCombineWithKeyTiers(t *testing.T) {
	t.Parallel()
	o := &overrideTable{}
	o.set("team", windowsOnly(llmrate.Window{Per: time.Hour, Requests: 5}))
	keyTier := uniform(windowsOnly(llmrate.Window{Per: time.Hour, Requests: 3, Tokens: 100}))
	h := newHarness(t, okHandler, llmrate.WithOverrides(o), llmrate.WithKeyTiers(keyTier), llmrate.WithWorkspace(wsFromHeader))
	for range 3 {
		require.Equal(t, http.StatusOK, h.sendAs("k1", "team", "", 0).Code)
	}
	w := h.sendAs("k1", "team", "", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the key's 3 per hour (tighter than the override's 5)")
	assert.Contains(t, w.Body.String(), "requests per hour (key)")
	require.Equal(t, http.StatusOK, h.sendAs("k2", "team", "", 0).Code)
	require.Equal(t, http.StatusOK, h.sendAs("k2", "team", "", 0).Code)
	w = h.sendAs("k2", "team", "", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, w.Body.String(), "requests per hour (workspace)", "the override's 5 per hour on the workspace")
	w = h.sendAs("k3", "team", "", 4*101)
	assert.Contains(t, w.Body.String(), "tokens per hour (key)", "the key tier's tokens meter, kept")
}

// Reservations count windows as any bucket.
func TestReservationWaitsForAWindow(t *testing.T) {
	t.Parallel()
	lim := windowsOnly(llmrate.Window{Per: time.Hour, Requests: 120})
	s := llmrate.NewMemoryStore()
	now := time.Unix(1_700_000_000, 0)
	admit := func(maxWait time.Duration) llmrate.Decision {
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1,
			Solo: true, Now: now, MaxWait: maxWait})
		require.NoError(t, err)
		return d
	}
	for range 120 {
		require.True(t, admit(0).Allowed)
	}
	now = now.Add(10 * time.Second) // one request per 30 s: a third back
	d := admit(30 * time.Second)
	assert.True(t, d.Allowed)
	assert.Equal(t, 20*time.Second, d.Wait, "the hour window's next request in 20 s")
	assert.Equal(t, []llmrate.WindowLevels{{Requests: -1}}, d.KeyWindows, "debited now, below zero")
	d = admit(30 * time.Second)
	assert.False(t, d.Allowed, "behind the first: 50 s > 30 s")
	assert.Equal(t, 50*time.Second, d.RetryAfter)
	assert.Equal(t, time.Hour, d.Window)
}

// The limits endpoint shows each row's windows, non-zero meters only;
// none where there are none, and none where the figures are null.
func TestLimitsEndpointWindows(t *testing.T) {
	t.Parallel()
	tiers := llmrate.DefaultTiers()
	tiers.Free.Windows = []llmrate.Window{{Per: 24 * time.Hour, Requests: 1500}, {Per: time.Minute, InputTokens: 400_000, OutputTokens: 80_000}}
	tiers.Enterprise.Windows = []llmrate.Window{{Per: time.Hour, Tokens: 1}}
	model := uniform(llmrate.Limits{RequestsPerMinute: 5, TokensPerMinute: 9, Windows: []llmrate.Window{{Per: 6 * time.Hour, Tokens: 1_000_000}}})
	l, err := llmrate.New(llmrate.WithTiers(tiers), llmrate.WithTierResolver(llmrate.StaticTiers{"sk-dev": llmrate.Developer, "sk-ent": llmrate.Enterprise}),
		llmrate.WithModel(modelHeaderExtractor), llmrate.WithModelLimits(llmrate.ModelLimits{"o3": model}))
	require.NoError(t, err)
	docs := "" // no link by default
	assert.Equal(t, jsonMap(t, `{"tier":"free","requestsPerMin":100,"tokensPerMin":200000`+docs+`,
		"windows":[{"seconds":86400,"requests":1500},{"seconds":60,"inputTokens":400000,"outputTokens":80000}],
		"models":{"o3":{"requestsPerMin":5,"tokensPerMin":9,"windows":[{"seconds":21600,"tokens":1000000}]}}}`), limitsOf(t, l, "sk-free"))
	assert.Equal(t, jsonMap(t, `{"tier":"developer","requestsPerMin":1000,"tokensPerMin":2000000`+docs+`,
		"models":{"o3":{"requestsPerMin":5,"tokensPerMin":9,"windows":[{"seconds":21600,"tokens":1000000}]}}}`), limitsOf(t, l, "sk-dev"))
	assert.Equal(t, jsonMap(t, `{"tier":"enterprise","requestsPerMin":null,"tokensPerMin":null,"note":"`+llmrate.EnterpriseNote+`"`+docs+`,
		"models":{"o3":{"requestsPerMin":null,"tokensPerMin":null}}}`), limitsOf(t, l, "sk-ent"))
}

// HeadersIETF adds each window bucket as its own item; HeadersOpenAI stays
// the minute's.
func TestWindowHeaders(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000,
		Windows: []llmrate.Window{{Per: 24 * time.Hour, Requests: 1500}, {Per: time.Minute, InputTokens: 400}}}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(lim)), llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	w := h.send("sk-h", 4*100)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"requests";q=20;w=120, "tokens";q=2000;w=120, "requests-86400";q=1500;w=86400, "input_tokens-60";q=400;w=60`,
		w.Header().Get(llmrate.HeaderRateLimitPolicy))
	// 1 of 1,500 per day is back in 57.6 s; 100 of 400 per minute in 15 s.
	assert.Equal(t, `"requests";r=19;t=6, "tokens";r=1900;t=6, "requests-86400";r=1499;t=58, "input_tokens-60";r=300;t=15`,
		w.Header().Get(llmrate.HeaderRateLimit))

	o := newHarness(t, okHandler, llmrate.WithTiers(uniform(lim)), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
	w = o.send("sk-h", 4*100)
	assert.Equal(t, "20", w.Header().Get(llmrate.HeaderLimitRequests))
	assert.Equal(t, "1900", w.Header().Get(llmrate.HeaderRemainingTokens))
}

// RateLimit-Policy's w and RateLimit's t are Integers in
// draft-ietf-httpapi-ratelimit-headers (structured fields: a Decimal such
// as 1.5 is not an Integer), so a window that is not whole seconds (valid:
// Per is whole milliseconds) must still produce whole-second parameters.
func TestWindowHeadersWholeSecondParameters(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000,
		Windows: []llmrate.Window{{Per: 1500 * time.Millisecond, Requests: 5}}}
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(lim)), llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	w := h.send("sk-h", 4)
	require.Equal(t, http.StatusOK, w.Code)
	policy := w.Header().Get(llmrate.HeaderRateLimitPolicy)
	for _, item := range strings.Split(policy, ", ") {
		for _, p := range strings.Split(item, ";")[1:] {
			if v, ok := strings.CutPrefix(p, "w="); ok {
				assert.NotContains(t, v, ".", "w must be an Integer: %s", policy)
			}
		}
	}
}
