package redisstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type onePlan llmrate.Plan

func (p onePlan) ResolvePlan(context.Context, string) (llmrate.Plan, bool) {
	return llmrate.Plan(p), true
}

// TestPlanDailyQuotaHoldsEveryModelThroughTheMiddleware is issue 42's
// repro through the limiter on Redis: a plan's calendar-day request quota
// in Asia/Tokyo, spent by gpt-4o-mini, refuses claude-* (an entry with
// its tokens per minute Unlimited) on the same key until Tokyo's
// midnight, by the store's clock, whatever the limiter's own clock says.
func TestPlanDailyQuotaHoldsEveryModelThroughTheMiddleware(t *testing.T) {
	tokyo := zone(t, "Asia/Tokyo")
	server := &fakeClock{t: time.Date(2026, time.March, 3, 9, 0, 0, 0, time.UTC)} // 18:00 in Tokyo
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c, redisstore.WithClock(server.now))
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: tokyo, Requests: 3}}},
		Models: map[string]llmrate.Limits{
			"gpt-4o-mini": {RequestsPerMinute: 100, TokensPerMinute: 100_000},
			"claude-*":    {RequestsPerMinute: 50, TokensPerMinute: llmrate.Unlimited, Windows: []llmrate.Window{{Per: time.Minute, InputTokens: 100_000}}},
		}}
	skewed := func() time.Time { return server.now().Add(-20 * time.Hour) } // the gateway host's clock: another day
	l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithClock(skewed), llmrate.WithStoreTimeout(10*time.Second),
		llmrate.WithPlans(onePlan(plan), plan), llmrate.WithModel(func(r *http.Request) (string, error) { return r.Header.Get("X-Model"), nil }))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	ts := httptest.NewServer(l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") })))
	t.Cleanup(ts.Close)
	send := func(model string) *http.Response {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, ts.URL, nil)
		require.NoError(t, err)
		r.Header.Set("Authorization", "Bearer sk-quota")
		r.Header.Set("X-Model", model)
		resp, err := ts.Client().Do(r)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp
	}
	for i := range 3 {
		require.Equal(t, http.StatusOK, send("gpt-4o-mini").StatusCode, "request %d", i)
	}
	resp := send("claude-3-5-sonnet")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the plan's quota holds claude too")
	assert.Equal(t, strconv.Itoa(6*3600), resp.Header.Get("Retry-After"), "to 00:00 in Tokyo, by the store's clock")
	assert.Equal(t, "false", resp.Header.Get(llmrate.HeaderShouldRetry))
	assert.Equal(t, http.StatusTooManyRequests, send("").StatusCode, "and a request without an entry")

	server.t = time.Date(2026, time.March, 3, 15, 0, 0, 0, time.UTC) // 00:00 on the 4th in Tokyo
	assert.Equal(t, http.StatusOK, send("claude-3-5-sonnet").StatusCode)
	assert.Zero(t, l.FailOpens())
}

// TestQuotaHeadersFollowTheServersPeriod: the store's clock decides the
// period (Redis: the server's). With the gateway host 10 minutes behind
// the server just past a UTC midnight, the IETF item's w is still the
// day's 86,400 s and the 429 names the server's next midnight.
func TestQuotaHeadersFollowTheServersPeriod(t *testing.T) {
	s, server, _ := quotaStore(t, time.Date(2026, time.March, 4, 0, 5, 0, 0, time.UTC))
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 2}}}}
	host := func() time.Time { return server.now().Add(-10 * time.Minute) }
	l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithClock(host), llmrate.WithStoreTimeout(10*time.Second),
		llmrate.WithPlans(llmrate.PlanResolverFunc(func(context.Context, string) (llmrate.Plan, bool) { return plan, true }), plan),
		llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") }))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer sk-skew")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for range 2 {
		w := send()
		require.Equal(t, http.StatusOK, w.Code)
		assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimitPolicy), `"requests-day";q=2;w=86400`, "the server's day, not the host's")
	}
	w := send()
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "86100", w.Header().Get("Retry-After"), "23 h 55 min to the server's midnight")
	assert.Contains(t, w.Body.String(), "(at 2026-03-05T00:00:00Z)", "the server's next midnight")
}
