package llmrate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setClock moves the harness's fake clock to t.
func (h *harness) setClock(t time.Time) { h.clock.Advance(t.Sub(h.clock.Now())) }

// sendModel sends one request for key on model (none when "") declaring
// contentLength bytes (an estimate of contentLength/4 tokens).
func (h *harness) sendModel(key, model string, contentLength int64) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
	r.ContentLength = contentLength
	r.Header.Set("Authorization", "Bearer "+key)
	if model != "" {
		r.Header.Set("X-Model", model)
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

// onePlan is a plan resolver answering plan for every workspace.
func onePlan(p llmrate.Plan) llmrate.Option {
	return llmrate.WithPlans(staticPlans{}, p)
}

// The worked example of docs/limits.md: Berlin's 2026-10-25 is 25 hours
// long (clocks go back at 03:00); spent at 20:00 local, the day's quota
// waits 4 h, and the IETF item's w is the day's real 90,000 s.
func TestCalendarDayOf25HoursInBerlin(t *testing.T) {
	t.Parallel()
	berlin := mustLoad(t, "Europe/Berlin")
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 10_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: berlin, Requests: 1_000}}}}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	h.setClock(time.Date(2026, 10, 25, 19, 0, 0, 0, time.UTC)) // 20:00 CET
	for i := range 1_000 {
		require.Equal(t, http.StatusOK, h.send("sk-a", 0).Code, "request %d", i)
	}
	w := h.send("sk-a", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "14400", w.Header().Get("Retry-After"), "4 h to 00:00 local")
	assert.Equal(t, "false", w.Header().Get(llmrate.HeaderShouldRetry))
	assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimitPolicy), `"requests-day";q=1000;w=90000`)
	assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimit), `"requests-day";r=0;t=14400`)
	h.setClock(time.Date(2026, 10, 25, 22, 59, 59, 0, time.UTC))
	assert.Equal(t, http.StatusTooManyRequests, h.send("sk-a", 0).Code, "23:59:59 local: still the 25-hour day")
	h.setClock(time.Date(2026, 10, 25, 23, 0, 0, 0, time.UTC))
	assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code, "00:00 local on the 26th: full again")
}

// Berlin's 2026-03-29 is 23 hours long (clocks jump from 02:00 to 03:00).
func TestCalendarDayOf23HoursInBerlin(t *testing.T) {
	t.Parallel()
	berlin := mustLoad(t, "Europe/Berlin")
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 10_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: berlin, Requests: 3}}}}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	h.setClock(time.Date(2026, 3, 29, 18, 0, 0, 0, time.UTC)) // 20:00 CEST
	for range 3 {
		require.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	}
	w := h.send("sk-a", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "14400", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimitPolicy), `"requests-day";q=3;w=82800`)
	h.setClock(time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC)) // 00:00 CEST on the 30th
	assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
}

// The worked example of docs/limits.md: a month spent on 2026-11-30 at
// 23:00 in Berlin waits 3,600 s and is full again, all 10 million at once,
// at 2026-12-01T00:00+01:00. TokensPerMinute is Unlimited: the 10^7-token
// request meets no per-minute tokens bucket.
func TestCalendarMonthFullOnTheFirstInBerlin(t *testing.T) {
	t.Parallel()
	berlin := mustLoad(t, "Europe/Berlin")
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: llmrate.Unlimited,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 10_000_000}}}}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	h.setClock(time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)) // 23:00 CET
	require.Equal(t, http.StatusOK, h.send("sk-a", 40_000_000).Code, "10,000,000 tokens")
	w := h.send("sk-a", 4)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "3600", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Body.String(), "Please try again in 3600s")
	assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimitPolicy), `"tokens-month";q=10000000;w=2592000`, "November: 30 days")
	assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimit), `"tokens-month";r=0;t=3600`)
	h.setClock(time.Date(2026, 12, 1, 0, 0, 0, 0, berlin))
	assert.Equal(t, http.StatusOK, h.send("sk-a", 40_000_000).Code, "full again on the 1st at 00:00")
}

// Asia/Tokyo's month ends at 15:00Z on the last day: a month spent at
// 14:00Z waits an hour.
func TestCalendarMonthInTokyo(t *testing.T) {
	t.Parallel()
	tokyo := mustLoad(t, "Asia/Tokyo")
	plan := llmrate.Plan{Name: "jp", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 100_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: tokyo, Requests: 2}}}}
	h := newHarness(t, okHandler, onePlan(plan))
	h.setClock(time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC))
	require.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	require.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	w := h.send("sk-a", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "3600", w.Header().Get("Retry-After"))
	h.setClock(time.Date(2026, 11, 30, 14, 59, 59, 0, time.UTC))
	assert.Equal(t, http.StatusTooManyRequests, h.send("sk-a", 0).Code)
	h.setClock(time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)) // 2026-12-01 00:00 JST
	assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
}

// The repro: a plan's monthly quota spent by one model entry's
// traffic refuses another entry's request on the same key.
func TestPlanQuotaHoldsEveryModelEntry(t *testing.T) {
	t.Parallel()
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Tokens: 1_000}}},
		Models: map[string]llmrate.Limits{
			"gpt-4o-mini": {RequestsPerMinute: 100, TokensPerMinute: 100_000},
			"claude-*": {RequestsPerMinute: 50, TokensPerMinute: llmrate.Unlimited,
				Windows: []llmrate.Window{{Per: time.Minute, InputTokens: 40_000, OutputTokens: 8_000}}},
		}}
	obs := &recorder{}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithModel(llmrate.Header("X-Model")), llmrate.WithObserver(obs))
	h.setClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	require.Equal(t, http.StatusOK, h.sendModel("sk-a", "gpt-4o-mini", 4_000).Code, "1,000 tokens: the month's")
	w := h.sendModel("sk-a", "claude-3-5-sonnet", 4)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the plan's quota holds claude traffic too")
	assert.Contains(t, w.Body.String(), "tokens per calendar month (UTC)")
	assert.Equal(t, "2116800", w.Header().Get("Retry-After"), "24 days 12 h to 2027-01-01T00:00Z")
	obs.mu.Lock()
	last := obs.decisions[len(obs.decisions)-1]
	obs.mu.Unlock()
	assert.True(t, last.Lent, "refused by the plan's window, lent to the entry")
	assert.Equal(t, "claude-*", last.Model)
	w = h.sendModel("sk-a", "gpt-3.5", 4)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "and a request on no entry: one quota")
}

// A plan's gauge holds the slots of an entry's requests: the very slots a
// request without an entry takes.
func TestPlanGaugeHoldsEntryTraffic(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	plan := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000, ConcurrentRequests: 1}
	entry := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000}
	for _, solo := range []bool{false, true} {
		ws := "ws"
		if solo {
			ws = "sk-a"
		}
		req := llmrate.AdmitRequest{Key: "sk-a", Workspace: ws, Model: "gpt-4o*", KeyLimits: entry, WorkspaceLimits: entry,
			KeyPlan: &plan, WorkspacePlan: &plan, Tokens: 1, Solo: solo, Now: now, ID: "a-" + ws}
		d, err := s.Admit(context.Background(), req)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		req.Model, req.ID = "claude-*", "b-"+ws
		d, err = s.Admit(context.Background(), req)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "Admit(%q): the plan's one slot is held by gpt-4o traffic", "claude-*")
		assert.True(t, d.Lent)
		want := llmrate.KeyConcurrent
		if !solo {
			want = llmrate.KeyConcurrent // the key's plan gauge comes first
		}
		assert.Equal(t, want, d.Refused)
		def := llmrate.AdmitRequest{Key: "sk-a", Workspace: ws, KeyLimits: plan, WorkspaceLimits: plan, Tokens: 1, Solo: solo, Now: now, ID: "c-" + ws}
		d, err = s.Admit(context.Background(), def)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "a request without an entry finds the same slot taken")
		rr := llmrate.ReconcileRequest{Key: "sk-a", Workspace: ws, Model: "gpt-4o*", KeyLimits: entry, WorkspaceLimits: entry,
			KeyPlan: &plan, WorkspacePlan: &plan, Estimate: 1, Actual: 1, Solo: solo, Now: now, ID: "a-" + ws}
		require.NoError(t, s.Reconcile(context.Background(), rr))
		d, err = s.Admit(context.Background(), def)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the reconcile released the lent slot")
	}
}

// Unlimited TPM on an entry: no tokens bucket, so a 10^9-token estimate
// fits the per-minute buckets, and HeadersOpenAI sends no tokens headers.
func TestUnlimitedTokensOnAnEntry(t *testing.T) {
	t.Parallel()
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 100_000},
		Models: map[string]llmrate.Limits{"claude-*": {RequestsPerMinute: 2, TokensPerMinute: llmrate.Unlimited}}}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithModel(llmrate.Header("X-Model")),
		llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
	w := h.sendModel("sk-a", "claude-3", 4_000_000_000)
	require.Equal(t, http.StatusOK, w.Code, "10^9 tokens: no tokens bucket to exceed")
	assert.Empty(t, w.Header().Get(llmrate.HeaderLimitTokens))
	assert.Empty(t, w.Header().Get(llmrate.HeaderRemainingTokens))
	assert.Equal(t, "4", w.Header().Get(llmrate.HeaderLimitRequests))
	assert.Equal(t, "3", w.Header().Get(llmrate.HeaderRemainingRequests))
	require.Equal(t, http.StatusOK, h.sendModel("sk-a", "claude-3", 4_000_000_000).Code)
	require.Equal(t, http.StatusOK, h.sendModel("sk-a", "claude-3", 4).Code)
	require.Equal(t, http.StatusOK, h.sendModel("sk-a", "claude-3", 4).Code)
	w = h.sendModel("sk-a", "claude-3", 4)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the requests bucket still holds (burst 4)")
	assert.Equal(t, "30", w.Header().Get("Retry-After"), "the requests bucket's wait alone")
}

// A late reconcile across a period's end: a debit still owed lands in the
// new period; a credit is dropped; within the period both land.
func TestLateReconcileAcrossAPeriodBoundary(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: time.UTC, Tokens: 100}}}
	before := time.Date(2026, 12, 7, 23, 59, 59, 0, time.UTC)
	after := time.Date(2026, 12, 8, 0, 0, 1, 0, time.UTC)
	cases := []struct {
		name   string
		at     time.Time // the reconcile's clock
		actual int64
		want   int64 // the day's level then
	}{
		{"debit in the period", before, 50, 50},
		{"credit in the period", before, 10, 90},
		{"debit owed after it", after, 50, 80},
		{"credit after it", after, 10, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := llmrate.NewMemoryStore()
			req := llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 30, Solo: true, Now: before}
			d, err := s.Admit(context.Background(), req)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			assert.Equal(t, int64(70), d.KeyWindows[0].Tokens)
			assert.Equal(t, time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC), d.KeyWindows[0].ResetAt())
			require.NoError(t, s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim,
				Estimate: 30, Actual: c.actual, Solo: true, Now: c.at, Admitted: before}))
			p, err := s.Peek(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true, Now: c.at})
			require.NoError(t, err)
			assert.Equal(t, c.want, p.KeyWindows[0].Tokens)
		})
	}
}

// A session opens at its first admitted request, a refusal never opens
// one, nothing refills within, and it is full again Per after it opened.
func TestSessionWindowOpensAtTheFirstAdmission(t *testing.T) {
	t.Parallel()
	sess := llmrate.Window{Per: 5 * time.Hour, Session: true, Requests: 2}
	lim := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{sess, {Per: time.Hour, Tokens: 100}}}
	s := llmrate.NewMemoryStore()
	t0 := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	admit := func(at time.Time, tokens int64) llmrate.Decision {
		t.Helper()
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: tokens, Now: at})
		require.NoError(t, err)
		return d
	}
	d := admit(t0, 101)
	require.False(t, d.Allowed, "101 tokens never fit the hour's 100")
	assert.True(t, d.NeverFits)
	p, err := s.Peek(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Now: t0})
	require.NoError(t, err)
	assert.Equal(t, int64(2), p.KeyWindows[0].Requests)
	assert.True(t, p.KeyWindows[0].Reset == 0, "a refusal opened no session")

	open := t0.Add(time.Hour)
	d = admit(open, 1)
	require.True(t, d.Allowed)
	assert.Equal(t, open.Add(5*time.Hour).UnixNano(), d.KeyWindows[0].Reset, "the session opened at its first admission")
	assert.Equal(t, int64(1), d.KeyWindows[0].Requests)
	require.True(t, admit(open.Add(4*time.Hour), 1).Allowed)
	d = admit(open.Add(4*time.Hour+30*time.Minute), 1)
	require.False(t, d.Allowed, "nothing refills within a session")
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.True(t, d.Session)
	assert.Equal(t, 5*time.Hour, d.Window)
	assert.Equal(t, 30*time.Minute, d.RetryAfter, "to the session's end")
	d = admit(open.Add(5*time.Hour), 1)
	require.True(t, d.Allowed, "full again Per after it opened")
	assert.Equal(t, open.Add(10*time.Hour).UnixNano(), d.KeyWindows[0].Reset, "a new session")
}

// A figure changed within a period keeps what was spent: remaining =
// figure − spent, in debt above it.
func TestCalendarFigureChangeKeepsWhatWasSpent(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	fig := func(n int64) llmrate.Limits {
		return llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
			Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: n}}}
	}
	admit := func(n int64) llmrate.Decision {
		t.Helper()
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: fig(n), WorkspaceLimits: fig(n), Tokens: 1, Now: now})
		require.NoError(t, err)
		return d
	}
	for range 6 {
		require.True(t, admit(10).Allowed)
	}
	d := admit(8)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.KeyWindows[0].Requests, "8 − 7 spent")
	d = admit(4)
	require.False(t, d.Allowed)
	assert.Equal(t, int64(-3), d.KeyWindows[0].Requests, "4 − 7: in debt")
	assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now), d.RetryAfter)
	d = admit(20)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(12), d.KeyWindows[0].Requests, "20 − 8: no free refill, nothing lost")
}

// HeadersOpenAI on a window's refusal reports that window, never the
// minute's full budget.
func TestOpenAIHeadersOnACalendarRefusal(t *testing.T) {
	t.Parallel()
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 100_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 1}}}}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
	h.setClock(time.Date(2026, 12, 7, 22, 0, 0, 0, time.UTC))
	require.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	w := h.send("sk-a", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get(llmrate.HeaderLimitRequests))
	assert.Equal(t, "0", w.Header().Get(llmrate.HeaderRemainingRequests))
	assert.Equal(t, "2h0m0s", w.Header().Get(llmrate.HeaderResetRequests))
	assert.Equal(t, "7200", w.Header().Get("Retry-After"))
}

// The IETF item of a session window is named by meter and Per.
func TestIETFSessionItem(t *testing.T) {
	t.Parallel()
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 100_000,
		Windows: []llmrate.Window{{Per: 5 * time.Hour, Session: true, Tokens: 1_000}}}}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	w := h.send("sk-a", 400)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimitPolicy), `"tokens-session-18000";q=1000`)
	assert.Contains(t, w.Header().Get(llmrate.HeaderRateLimit), `"tokens-session-18000";r=900;t=18000`)
}

// remainingOf returns the limits endpoint's "remaining" (ShowRemaining).
func remainingOf(t *testing.T, l *llmrate.Limiter, key string) any {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/limits", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	l.LimitsHandler(llmrate.ShowRemaining()).ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	return jsonMap(t, w.Body.String())["remaining"]
}

// The limits endpoint's remaining is a Peek: levels as Admit would find
// them, debiting nothing, opening no session.
func TestLimitsEndpointShowsWhatIsLeft(t *testing.T) {
	t.Parallel()
	berlin := mustLoad(t, "Europe/Berlin")
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 5_000}, {Per: 5 * time.Hour, Session: true, Requests: 3}}}}
	h := newHarness(t, okHandler, onePlan(plan))
	h.setClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	fresh := `[
		{"scope":"key","meter":"requests","window":"minute","remaining":20},
		{"scope":"key","meter":"tokens","window":"minute","remaining":2000},
		{"scope":"key","meter":"tokens","calendar":"month","zone":"Europe/Berlin","remaining":5000},
		{"scope":"key","meter":"requests","window":"5h0m0s","session":true,"remaining":3}]`
	assert.Equal(t, jsonAny(t, fresh), remainingOf(t, h.lim, "sk-a"), "never used: full, no session open")
	assert.Equal(t, jsonAny(t, fresh), remainingOf(t, h.lim, "sk-a"), "a read debits nothing")
	h.clock.Advance(time.Hour) // 13:00Z
	require.Equal(t, http.StatusOK, h.send("sk-a", 400).Code, "100 tokens")
	assert.Equal(t, jsonAny(t, `[
		{"scope":"key","meter":"requests","window":"minute","remaining":19,"fullAt":"2026-11-29T13:00:06Z"},
		{"scope":"key","meter":"tokens","window":"minute","remaining":1900,"fullAt":"2026-11-29T13:00:06Z"},
		{"scope":"key","meter":"tokens","calendar":"month","zone":"Europe/Berlin","remaining":4900,"fullAt":"2026-12-01T00:00:00+01:00"},
		{"scope":"key","meter":"requests","window":"5h0m0s","session":true,"remaining":2,"fullAt":"2026-11-29T18:00:00Z"}]`),
		remainingOf(t, h.lim, "sk-a"), "the session opened at the admission (13:00Z), not at the first read")
	// The session window's row says when the open session ends.
	r := httptest.NewRequest(http.MethodGet, "/limits", nil)
	r.Header.Set("Authorization", "Bearer sk-a")
	w := httptest.NewRecorder()
	h.lim.LimitsHandler(llmrate.ShowRemaining()).ServeHTTP(w, r)
	windows := jsonMap(t, w.Body.String())["windows"].([]any)
	assert.Equal(t, jsonAny(t, `{"seconds":18000,"session":true,"requests":3,"resetsAt":"2026-11-29T18:00:00Z"}`), windows[1])
	w = httptest.NewRecorder()
	h.lim.LimitsHandler().ServeHTTP(w, r)
	assert.Equal(t, jsonAny(t, `{"seconds":18000,"session":true,"requests":3}`), jsonMap(t, w.Body.String())["windows"].([]any)[1], "without ShowRemaining: no store read")
}

func jsonAny(t *testing.T, s string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v))
	return v
}

// Follow (the Redis fallback's mirror) follows calendar and session
// levels and periods: a quota the shared store reported spent stays spent
// in the fallback.
func TestFollowKeepsASpentQuota(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	lim := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Tokens: 100}, {Per: 5 * time.Hour, Session: true, Requests: 10}}}
	monthEnd := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sessionEnd := now.Add(2 * time.Hour)
	for _, solo := range []bool{false, true} {
		s := llmrate.NewMemoryStore()
		ws := "ws"
		if solo {
			ws = "k"
		}
		r := llmrate.AdmitRequest{Key: "k", Workspace: ws, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: solo, Now: now}
		levels := []llmrate.WindowLevels{{Tokens: 0, Reset: monthEnd.UnixNano()}, {Requests: 4, Reset: sessionEnd.UnixNano()}}
		s.Follow(r, llmrate.Decision{Allowed: true, Remaining: [4]int64{1999, 1999999, 1999, 1999999}, KeyWindows: levels, WorkspaceWindows: levels})
		d, err := s.Admit(context.Background(), r)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "solo %v: the month the shared store reported spent", solo)
		assert.Equal(t, llmrate.CalendarMonth, d.Calendar)
		assert.Equal(t, monthEnd.Sub(now), d.RetryAfter)
		r.KeyLimits.Windows = lim.Windows[1:]
		r.WorkspaceLimits.Windows = lim.Windows[1:]
		d, err = s.Admit(context.Background(), r)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, int64(3), d.KeyWindows[0].Requests, "solo %v: the session the shared store opened, 4 left, less this one", solo)
		assert.True(t, sessionEnd.Equal(d.KeyWindows[0].ResetAt()), "solo %v: its end", solo)
	}
}

// A reservation never waits across a period's start: a request that would
// wait for its calendar window is refused, Retry-After to the boundary;
// one whose calendar window has room waits for its minute as usual, when
// its wait ends within the day (TestNoReservationRunningIntoTheNextPeriod:
// one that would run in the next day is refused).
func TestNoReservationAcrossAPeriodStart(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	now := time.Date(2026, 12, 7, 23, 58, 0, 0, time.UTC)
	lim := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 3}}}
	admit := func() llmrate.Decision {
		t.Helper()
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Now: now, MaxWait: 5 * time.Minute})
		require.NoError(t, err)
		return d
	}
	require.True(t, admit().Allowed)
	require.True(t, admit().Allowed, "the burst of 2")
	d := admit()
	require.True(t, d.Allowed, "the day has room: a reservation for the minute's bucket, run at 23:59:00")
	assert.Equal(t, 60*time.Second, d.Wait)
	now = now.Add(90 * time.Second) // 23:59:30: the minute's bucket at 0.5, the day spent
	d = admit()
	assert.False(t, d.Allowed, "the day is spent: no wait across 00:00, though every bucket would have room within MaxWait")
	assert.Equal(t, llmrate.KeyRequests, d.Refused, "the minute's bucket, first in the order")
	assert.Equal(t, 30*time.Second, d.RetryAfter, "the minute's half a request and the day's 30 s")
	assert.Zero(t, d.Wait)
}

// A plan's rolling window lent to an entry's request is the very window a
// request on no entry spends; a session beside a rolling window of the
// same Per is another bucket.
func TestLentRollingWindowAndSessionIdentity(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	plan := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Per: 5 * time.Hour, Requests: 3}, {Per: 5 * time.Hour, Session: true, Requests: 2}}}
	entry := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000}
	onEntry := llmrate.AdmitRequest{Key: "k", Workspace: "w", Model: "gpt-*", KeyLimits: entry, WorkspaceLimits: entry, KeyPlan: &plan, WorkspacePlan: &plan, Tokens: 1, Now: now}
	noEntry := llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: plan, WorkspaceLimits: plan, Tokens: 1, Now: now}
	d, err := s.Admit(context.Background(), onEntry)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NotNil(t, d.Plan)
	assert.Equal(t, int64(2), d.Plan.KeyWindows[0].Requests, "the rolling 5 h: 3 − 1")
	assert.Equal(t, int64(1), d.Plan.KeyWindows[1].Requests, "the 5 h session: 2 − 1, its own bucket")
	d, err = s.Admit(context.Background(), noEntry)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.KeyWindows[0].Requests, "the same rolling window: 3 − 2")
	assert.Equal(t, int64(0), d.KeyWindows[1].Requests, "the same session: 2 − 2")
	d, err = s.Admit(context.Background(), onEntry)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.True(t, d.Lent)
	assert.True(t, d.Session, "the session refused (the rolling window has 1 left)")
	assert.Equal(t, 5*time.Hour, d.RetryAfter, "to the session's end")
}

// HeadersOpenAI on a calendar tokens window's refusal reports that window
// in the tokens headers: its figure, what is left, the time to its end.
func TestOpenAITokensHeadersOnAMonthlyRefusal(t *testing.T) {
	t.Parallel()
	plan := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 100_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Tokens: 1_000}}}}
	h := newHarness(t, okHandler, onePlan(plan), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
	h.setClock(time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC))
	require.Equal(t, http.StatusOK, h.send("sk-a", 3_600).Code, "900 tokens")
	w := h.send("sk-a", 800) // 200 tokens: 100 left
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1000", w.Header().Get(llmrate.HeaderLimitTokens))
	assert.Equal(t, "100", w.Header().Get(llmrate.HeaderRemainingTokens))
	assert.Equal(t, "1h0m0s", w.Header().Get(llmrate.HeaderResetTokens))
	assert.Equal(t, "3600", w.Header().Get("Retry-After"))
}

// A priority reserve on a monthly quota is capacity the other classes
// never reach that month: a refused batch request waits for the 1st.
func TestReserveOnAMonthlyQuota(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	lim := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: 10}}}
	admit := func(reserve int64) llmrate.Decision {
		t.Helper()
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Now: now, Reserve: reserve})
		require.NoError(t, err)
		return d
	}
	for i := range 5 {
		require.True(t, admit(500_000).Allowed, "batch request %d: above the floor of 5", i+1)
	}
	d := admit(500_000)
	require.False(t, d.Allowed, "the month's other 5 are kept from the batch class")
	assert.True(t, d.ByReserve)
	assert.Equal(t, llmrate.CalendarMonth, d.Calendar)
	assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now), d.RetryAfter, "to the 1st")
	assert.True(t, admit(0).Allowed, "a request without a reserve spends the rest")
}

// TestNoReservationRunningIntoTheNextPeriod: a reservation granted at
// 23:59:30 that would wait 60 s for the tokens bucket would run at 00:00:30
// the next day, debited in the day that ended: the next day would then
// admit its whole figure beside it. It is refused instead (Retry-After the
// wait), and the next day admits its 3 and no more.
func TestNoReservationRunningIntoTheNextPeriod(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 100,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 3}}}
	t0 := time.Date(2026, 12, 7, 23, 59, 30, 0, time.UTC)
	admit := func(at time.Time, tokens int64, wait time.Duration) llmrate.Decision {
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: tokens, Now: at, MaxWait: wait})
		require.NoError(t, err)
		return d
	}
	require.True(t, admit(t0, 200, 0).Allowed, "drains the 200-token burst")
	d := admit(t0, 100, 5*time.Minute)
	assert.False(t, d.Allowed, "its 60 s wait would end in the next day")
	assert.Equal(t, time.Minute, d.RetryAfter, "100 tokens at 100 per minute")
	d = admit(t0.Add(25*time.Second), 1, 5*time.Minute)
	assert.True(t, d.Allowed, "a 0.6 s wait ends at 23:59:55.6, within the day")
	n := 0
	next := time.Date(2026, 12, 8, 0, 10, 0, 0, time.UTC)
	for i := range 5 {
		if admit(next.Add(time.Duration(i)*time.Second), 1, 0).Allowed {
			n++
		}
	}
	assert.Equal(t, 3, n, "the new day holds its 3")
}
