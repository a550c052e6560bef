package llmrate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// staticPlans resolves workspaces to plans from a map.
type staticPlans map[string]llmrate.Plan

func (m staticPlans) ResolvePlan(_ context.Context, ws string) (llmrate.Plan, bool) {
	p, ok := m[ws]
	return p, ok
}

var tinyPlan = llmrate.Plan{Name: "tiny", Limits: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1_000}}

func TestPlanNameInRefusalEventAndLimits(t *testing.T) {
	t.Parallel()
	obs := &recorder{}
	pro := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 2, TokensPerMinute: 10_000}}
	h := newHarness(t, okHandler, llmrate.WithPlans(staticPlans{"sk-pro": pro}, tinyPlan), llmrate.WithObserver(obs))
	for range 4 { // burst 2 × 2
		require.Equal(t, http.StatusOK, h.send("sk-pro", 0).Code)
	}
	w := h.send("sk-pro", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, w.Body.String(), "Rate limit reached for requests per minute (key) on the pro plan: limit 2 per minute, burst 4. Please try again in 30s.\"")
	assert.NotContains(t, w.Body.String(), "tier")
	assert.NotContains(t, w.Body.String(), "See ", "no link by default")
	assert.Empty(t, w.Header().Get(llmrate.HeaderShouldRetry), "a 30 s wait: the SDKs may retry")
	obs.mu.Lock()
	last := obs.decisions[len(obs.decisions)-1]
	obs.mu.Unlock()
	assert.Equal(t, "pro", last.Plan)
	assert.True(t, last.Named, "under WithPlans")

	w = h.send("sk-unknown", 0)
	require.Equal(t, http.StatusOK, w.Code)
	w = h.send("sk-unknown", 0)
	require.Equal(t, http.StatusOK, w.Code, "burst 2 of a 1 RPM plan")
	w = h.send("sk-unknown", 0)
	assert.Contains(t, w.Body.String(), "on the tiny plan", "an unknown workspace gets otherwise")

	assert.Equal(t, jsonMap(t, `{"plan":"pro","requestsPerMin":2,"tokensPerMin":10000}`), limitsOf(t, h.lim, "sk-pro"))
	assert.Equal(t, jsonMap(t, `{"plan":"tiny","requestsPerMin":1,"tokensPerMin":1000}`), limitsOf(t, h.lim, "sk-other"))
}

func TestTierNameIsThePlanWithoutPlans(t *testing.T) {
	t.Parallel()
	obs := &recorder{}
	h := newHarness(t, okHandler, llmrate.WithObserver(obs))
	require.Equal(t, http.StatusOK, h.send("sk-a", 0).Code)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	assert.Equal(t, "free", obs.decisions[0].Plan)
	assert.False(t, obs.decisions[0].Named, "a tier, not WithPlans'")
	assert.Equal(t, llmrate.Free, obs.decisions[0].Tier)
}

func TestWithPlansExcludesTierOptions(t *testing.T) {
	t.Parallel()
	plans := llmrate.WithPlans(staticPlans{}, tinyPlan)
	for name, o := range map[string]llmrate.Option{
		"WithTiers":        llmrate.WithTiers(llmrate.DefaultTiers()),
		"WithTierResolver": llmrate.WithTierResolver(llmrate.StaticTiers{}),
		"WithKeyTiers":     llmrate.WithKeyTiers(llmrate.DefaultTiers()),
		"WithModelLimits":  llmrate.WithModelLimits(llmrate.ModelLimits{"o3": llmrate.DefaultTiers()}),
		"WithOverrides": llmrate.WithOverrides(llmrate.OverrideResolverFunc(func(context.Context, string) (llmrate.Limits, bool) {
			return llmrate.Limits{}, false
		})),
	} {
		_, err := llmrate.New(plans, o, llmrate.WithModel(modelHeaderExtractor))
		var ce *llmrate.ConfigError
		require.ErrorAs(t, err, &ce, name)
		assert.Contains(t, err.Error(), name+" beside WithPlans")
	}
	_, err := llmrate.New(plans, llmrate.WithModel(modelHeaderExtractor))
	assert.NoError(t, err, "WithModel is allowed beside WithPlans")
	_, err = llmrate.New(llmrate.WithPlans(nil, tinyPlan))
	assert.Error(t, err)
}

func TestBadOtherwisePlanIsAConfigError(t *testing.T) {
	t.Parallel()
	ok := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}
	for name, p := range map[string]llmrate.Plan{
		"no name":           {Limits: ok},
		"newline":           {Name: "pro\n", Limits: ok},
		"non-ASCII":         {Name: "prö", Limits: ok},
		"space":             {Name: "pro plan", Limits: ok},
		"65 bytes":          {Name: strings.Repeat("a", 65), Limits: ok},
		"zero figures":      {Name: "zero"},
		"negative -2":       {Name: "neg", Limits: llmrate.Limits{RequestsPerMinute: -2, TokensPerMinute: 1}},
		"bad keys":          {Name: "k", Limits: ok, Keys: &llmrate.Limits{}},
		"bad model figures": {Name: "m", Limits: ok, Models: map[string]llmrate.Limits{"o3": {}}},
		"bad model name":    {Name: "m", Limits: ok, Models: map[string]llmrate.Limits{"o*3": ok}},
	} {
		_, err := llmrate.New(llmrate.WithPlans(staticPlans{}, p), llmrate.WithModel(modelHeaderExtractor))
		var ce *llmrate.ConfigError
		assert.ErrorAs(t, err, &ce, name)
	}
	_, err := llmrate.New(llmrate.WithPlans(staticPlans{}, llmrate.Plan{Name: strings.Repeat("a", 64), Limits: ok}))
	assert.NoError(t, err, "64 bytes is the longest name")
	_, err = llmrate.New(llmrate.WithPlans(staticPlans{}, llmrate.Plan{Name: "A-z_0.9", Limits: ok}))
	assert.NoError(t, err)
	_, err = llmrate.New(llmrate.WithPlans(staticPlans{}, llmrate.Plan{Name: "m", Limits: ok, Models: map[string]llmrate.Limits{"o3": ok}}))
	assert.ErrorContains(t, err, "needs WithModel", "Plan.Models without WithModel")
}

func TestBadResolvedPlanFailsOpenOnce(t *testing.T) {
	t.Parallel()
	obs := &recorder{}
	bad := llmrate.Plan{Name: "bad plan", Limits: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}}
	resolver := llmrate.PlanResolverFunc(func(_ context.Context, ws string) (llmrate.Plan, bool) {
		switch ws {
		case "sk-bad":
			return bad, true
		case "sk-panic":
			panic("resolver down")
		}
		return llmrate.Plan{}, false
	})
	h := newHarness(t, okHandler, llmrate.WithPlans(resolver, tinyPlan), llmrate.WithObserver(obs))
	for i := range 3 {
		assert.Equal(t, http.StatusOK, h.send("sk-bad", 0).Code, "a bad plan fails open, not otherwise's 1 RPM")
		assert.Equal(t, int64(i+1), h.lim.FailOpens())
	}
	assert.Equal(t, http.StatusOK, h.send("sk-panic", 0).Code)
	assert.Equal(t, int64(4), h.lim.FailOpens())
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.failOpens, 4)
	assert.Empty(t, obs.decisions, "a fail-open emits no Decided")
	for _, ev := range obs.failOpens {
		assert.Equal(t, "", ev.Plan)
	}
	assert.ErrorIs(t, obs.failOpens[0].Err, llmrate.ErrInvalidPlan)
	var pe *llmrate.PanicError
	assert.ErrorAs(t, obs.failOpens[3].Err, &pe)
}

func TestUnlimitedIsOnlyMinusOne(t *testing.T) {
	t.Parallel()
	for _, l := range []llmrate.Limits{
		{RequestsPerMinute: 0, TokensPerMinute: 1},
		{RequestsPerMinute: -2, TokensPerMinute: 1},
		{RequestsPerMinute: 1, TokensPerMinute: -1_000},
		{RequestsPerMinute: 1, TokensPerMinute: 0},
	} {
		assert.Error(t, l.Validate(), "%+v", l)
	}
	assert.NoError(t, llmrate.Limits{RequestsPerMinute: llmrate.Unlimited, TokensPerMinute: llmrate.Unlimited}.Validate())
	assert.Equal(t, int64(-1), llmrate.Unlimited)
}

func TestCalendarAndSessionWindowValidation(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	lim := func(ws ...llmrate.Window) llmrate.Limits {
		return llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 10, Windows: ws}
	}
	month := llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 1_000}
	for name, l := range map[string]llmrate.Limits{
		"Per with a Calendar":      lim(llmrate.Window{Per: time.Hour, Calendar: llmrate.CalendarDay, Zone: berlin, Tokens: 1}),
		"Calendar without Zone":    lim(llmrate.Window{Calendar: llmrate.CalendarDay, Tokens: 1}),
		"Zone without Calendar":    lim(llmrate.Window{Per: time.Hour, Zone: berlin, Tokens: 1}),
		"time.Local":               lim(llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.Local, Tokens: 1}),
		"FixedZone":                lim(llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.FixedZone("X", 3600), Tokens: 1}),
		"FixedZone named a zone":   lim(llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.FixedZone("Europe/Berlin", 3600), Tokens: 1}),
		"unknown Calendar":         lim(llmrate.Window{Calendar: 9, Zone: berlin, Tokens: 1}),
		"all figures 0":            lim(llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: berlin}),
		"Session without Per":      lim(llmrate.Window{Session: true, Tokens: 1}),
		"Session with Calendar":    lim(llmrate.Window{Session: true, Calendar: llmrate.CalendarDay, Zone: berlin, Tokens: 1}),
		"session over 744 h":       lim(llmrate.Window{Session: true, Per: 745 * time.Hour, Tokens: 1}),
		"two of one identity":      lim(month, month),
		"two zones of one name":    lim(month, llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: mustLoad(t, "Europe/Berlin"), Requests: 5}),
		"two sessions of one Per":  lim(llmrate.Window{Session: true, Per: time.Hour, Tokens: 1}, llmrate.Window{Session: true, Per: time.Hour, Requests: 1}),
		"negative calendar figure": lim(llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Tokens: -1}),
	} {
		assert.Error(t, l.Validate(), name)
	}
	for name, l := range map[string]llmrate.Limits{
		"one calendar in two zones":       lim(month, llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: tokyo, Tokens: 1_000}),
		"a day and a month in one zone":   lim(month, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: berlin, Tokens: 100}),
		"calendar day beside rolling 24h": lim(llmrate.Window{Calendar: llmrate.CalendarDay, Zone: berlin, Tokens: 100}, llmrate.Window{Per: 24 * time.Hour, Tokens: 100}),
		"UTC":                             lim(llmrate.Window{Calendar: llmrate.CalendarWeek, Zone: time.UTC, Requests: 1}),
		"session beside rolling 5h":       lim(llmrate.Window{Session: true, Per: 5 * time.Hour, Tokens: 1}, llmrate.Window{Per: 5 * time.Hour, Tokens: 1}),
		"session of 744 h":                lim(llmrate.Window{Session: true, Per: 744 * time.Hour, Tokens: 1}),
	} {
		assert.NoError(t, l.Validate(), name)
	}
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	require.NoError(t, err)
	return l
}

// plainStore is a Store that keeps no quotas (not a QuotaStore).
type plainStore struct{ llmrate.Store }

func TestQuotasNeedAQuotaStore(t *testing.T) {
	t.Parallel()
	s := plainStore{llmrate.NewMemoryStore()}
	calendar := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 10, Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Tokens: 5}}}
	unlimited := llmrate.Limits{RequestsPerMinute: llmrate.Unlimited, TokensPerMinute: 10}
	daily := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 10, Windows: []llmrate.Window{{Per: 24 * time.Hour, Requests: 5}}}
	for name, opts := range map[string][]llmrate.Option{
		"plans":              {llmrate.WithPlans(staticPlans{}, tinyPlan)},
		"calendar tier":      {llmrate.WithTiers(uniform(calendar))},
		"Unlimited key tier": {llmrate.WithKeyTiers(uniform(unlimited))},
		"entry under a quota": {llmrate.WithTiers(uniform(daily)), llmrate.WithModel(modelHeaderExtractor),
			llmrate.WithModelLimits(llmrate.ModelLimits{"o3": uniform(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1})})},
	} {
		_, err := llmrate.New(append(opts, llmrate.WithStore(s))...)
		var ce *llmrate.ConfigError
		assert.ErrorAs(t, err, &ce, name)
		assert.ErrorContains(t, err, "QuotaStore", name)
	}
	_, err := llmrate.New(llmrate.WithStore(s), llmrate.WithTiers(uniform(daily)))
	assert.NoError(t, err, "rolling windows need no QuotaStore")
}

func TestNeverFitsSaysDoNotRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler, llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 100})))
	w := h.send("sk-a", 4*201) // 201 tokens: above the bucket's 200
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"))
	assert.Equal(t, "false", w.Header().Get(llmrate.HeaderShouldRetry))
	assert.NotContains(t, w.Body.String(), "See ")
	assert.Contains(t, w.Body.String(), "move to a larger tier.\"")
}

func TestDocsURLWhenSet(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler, llmrate.WithPlans(staticPlans{}, tinyPlan), llmrate.WithDocsURL("https://example.com/plans"))
	h.burst("sk-a", 10)
	w := h.send("sk-a", 0)
	assert.Contains(t, w.Body.String(), "Please try again in 60s. See https://example.com/plans\"")
	assert.Equal(t, jsonMap(t, `{"plan":"tiny","requestsPerMin":1,"tokensPerMin":1000,"docs":"https://example.com/plans"}`), limitsOf(t, h.lim, "sk-a"))
}

func TestLimitsEndpointShowsUnlimitedCalendarAndSession(t *testing.T) {
	t.Parallel()
	berlin := mustLoad(t, "Europe/Berlin")
	claude := llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: llmrate.Unlimited,
		Windows: []llmrate.Window{{Per: time.Minute, InputTokens: 40_000, OutputTokens: 8_000}}}
	pro := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 200_000, Windows: []llmrate.Window{
		{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 10_000_000},
		{Session: true, Per: 5 * time.Hour, Requests: 200},
	}}, Models: map[string]llmrate.Limits{"claude-*": claude}}
	c := newFakeClock() // 2026-11-29T12:00:00Z: the next month in Berlin starts 2026-12-01T00:00+01:00
	l, err := llmrate.New(llmrate.WithClock(c.Now), llmrate.WithPlans(staticPlans{}, pro), llmrate.WithModel(modelHeaderExtractor))
	require.NoError(t, err)
	assert.Equal(t, jsonMap(t, `{"plan":"pro","requestsPerMin":500,"tokensPerMin":200000,
		"windows":[{"calendar":"month","zone":"Europe/Berlin","resetsAt":"2026-12-01T00:00:00+01:00","tokens":10000000},
			{"seconds":18000,"session":true,"requests":200}],
		"models":{"claude-*":{"requestsPerMin":50,"tokensPerMin":"unlimited","windows":[{"seconds":60,"inputTokens":40000,"outputTokens":8000}]}}}`),
		limitsOf(t, l, "sk-a"))
}

func TestLimitsEndpointBadPlanIs500(t *testing.T) {
	t.Parallel()
	resolver := llmrate.PlanResolverFunc(func(context.Context, string) (llmrate.Plan, bool) { return llmrate.Plan{Name: "x"}, true })
	l, err := llmrate.New(llmrate.WithPlans(resolver, tinyPlan))
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodGet, "/limits", nil)
	r.Header.Set("Authorization", "Bearer sk-a")
	w := httptest.NewRecorder()
	l.LimitsHandler().ServeHTTP(w, r)
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Equal(t, int64(1), l.FailOpens())
}

// TestLogsNameThePlanUnderPlans: under plans a log line names the plan,
// never a tier (the tier means nothing there); without plans, the tier.
func TestLogsNameThePlanUnderPlans(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	resolver := llmrate.PlanResolverFunc(func(_ context.Context, ws string) (llmrate.Plan, bool) {
		if ws == "sk-panic" {
			panic("resolver down")
		}
		return llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1_000}}, true
	})
	h := newHarness(t, okHandler, llmrate.WithPlans(resolver, tinyPlan), llmrate.WithLogger(zap.New(core)))
	h.burst("sk-a", 5)
	require.Equal(t, http.StatusOK, h.send("sk-panic", 0).Code)
	fields := func(msg string) map[string]any {
		t.Helper()
		entries := logs.FilterMessage(msg).All()
		require.NotEmpty(t, entries, msg)
		return entries[0].ContextMap()
	}
	refused := fields("llmrate: refused")
	assert.Equal(t, "pro", refused["plan"])
	assert.NotContains(t, refused, "tier")
	failed := fields("llmrate: failing open")
	assert.Equal(t, "", failed["plan"])
	assert.NotContains(t, failed, "tier")
}
