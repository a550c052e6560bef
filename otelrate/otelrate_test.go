package otelrate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/llmratetest"
	"github.com/llmrate/llmrate/otelrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newObserver returns an Observer on a MeterProvider read by hand.
func newObserver(t *testing.T) (*otelrate.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	obs, err := otelrate.New(otelrate.WithMeterProvider(provider))
	require.NoError(t, err)
	return obs, reader
}

func collect(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	return rm
}

// find returns the metric named name, failing the test when there is none.
func find(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	require.FailNow(t, "no metric "+name)
	return metricdata.Metrics{}
}

// label renders an attribute set as "k=v,k=v", keys sorted.
func label(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// counts returns a monotonic Int64 counter's value per attribute set.
func counts(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]int64 {
	t.Helper()
	m := find(t, rm, name)
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is an int64 sum, not %T", name, m.Data)
	assert.True(t, sum.IsMonotonic, "%s is a counter", name)
	assert.Equal(t, metricdata.CumulativeTemporality, sum.Temporality)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		out[label(dp.Attributes)] = dp.Value
	}
	return out
}

type hist struct {
	Count uint64
	Sum   float64
}

// hists returns a histogram's count and sum per attribute set.
func hists(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]hist {
	t.Helper()
	m := find(t, rm, name)
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a float64 histogram, not %T", name, m.Data)
	out := map[string]hist{}
	for _, dp := range h.DataPoints {
		out[label(dp.Attributes)] = hist{dp.Count, dp.Sum}
	}
	return out
}

// TestInstrumentsFromEvents: each event lands on its instruments with
// exactly the listed attributes.
func TestInstrumentsFromEvents(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	free, team := llmrate.Free, llmrate.Team
	for range 3 {
		obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: free, Estimate: 10})
	}
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: team, Model: "gpt-4o*", Estimate: 10})
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: free, Wait: 1500 * time.Millisecond})
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: free, Wait: 250 * time.Millisecond})
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: team, Model: "gpt-4o*", Wait: 4 * time.Second})
	obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyTokens, Window: time.Minute, Tier: free, RetryAfter: 3 * time.Second})
	obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyTokens, Window: time.Minute, Tier: free, RetryAfter: 9 * time.Second})
	obs.Decided(llmrate.DecisionEvent{Refused: llmrate.WorkspaceConcurrent, Tier: team, Model: "gpt-4o*"})
	// A window of a day (Limits.Windows) refused it.
	obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyTokens, Window: 24 * time.Hour, Tier: free})
	obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyRequests, Window: time.Minute, Tier: free, Shadow: true})
	// In shadow mode every decision is marked Shadow: an admitted one is
	// still "allowed".
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: free, Shadow: true})

	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileUsage, Estimate: 40, Actual: 30, Reported: llmrate.Usage{InputTokens: 10, OutputTokens: 20}})
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileUsage, Estimate: 10, Actual: 25, Reported: llmrate.Usage{InputTokens: 5, OutputTokens: 20}})
	// A cost of its own (output weighted ×4): not split.
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileUsage, Estimate: 50, Actual: 100, Reported: llmrate.Usage{InputTokens: 20, OutputTokens: 20}})
	// Partial usage: reported input 7 plus generated text's 12 (> reported output 1).
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcilePartial, Estimate: 8, Actual: 19, Reported: llmrate.Usage{InputTokens: 7, OutputTokens: 1}, Cut: true})
	// Partial usage whose charge is its input plus its output: split.
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcilePartial, Estimate: 8, Actual: 9, Reported: llmrate.Usage{InputTokens: 7, OutputTokens: 2}, Cut: true})
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileEstimated, Estimate: 12, Actual: 12})

	obs.FailedOpen(llmrate.FailOpenEvent{Op: "admit", Err: errors.New("x")})
	obs.FailedOpen(llmrate.FailOpenEvent{Op: "admit", Err: errors.New("y")})
	obs.FailedOpen(llmrate.FailOpenEvent{Op: "reconcile", Err: errors.New("z")})
	obs.Evicted()
	obs.Evicted()

	rm := collect(t, reader)
	require.Len(t, rm.ScopeMetrics, 1)
	assert.Equal(t, "github.com/llmrate/llmrate/otelrate", rm.ScopeMetrics[0].Scope.Name)

	assert.Equal(t, map[string]int64{
		"llmrate.model=,llmrate.plan=,llmrate.result=allowed,llmrate.tier=free":                                                            4,
		"llmrate.model=gpt-4o*,llmrate.plan=,llmrate.result=allowed,llmrate.tier=team":                                                     1,
		"llmrate.model=,llmrate.plan=,llmrate.result=waited,llmrate.tier=free":                                                             2,
		"llmrate.model=gpt-4o*,llmrate.plan=,llmrate.result=waited,llmrate.tier=team":                                                      1,
		"llmrate.bucket=key_tokens,llmrate.model=,llmrate.plan=,llmrate.result=refused,llmrate.tier=free,llmrate.window_ms=60000":          2,
		"llmrate.bucket=key_tokens,llmrate.model=,llmrate.plan=,llmrate.result=refused,llmrate.tier=free,llmrate.window_ms=86400000":       1,
		"llmrate.bucket=workspace_concurrent,llmrate.model=gpt-4o*,llmrate.plan=,llmrate.result=refused,llmrate.tier=team":                 1,
		"llmrate.bucket=key_requests,llmrate.model=,llmrate.plan=,llmrate.result=shadow_refused,llmrate.tier=free,llmrate.window_ms=60000": 1,
	}, counts(t, rm, "llmrate.decisions"))
	assert.Equal(t, map[string]hist{
		"llmrate.model=,llmrate.plan=,llmrate.tier=free":        {Count: 2, Sum: 1.75},
		"llmrate.model=gpt-4o*,llmrate.plan=,llmrate.tier=team": {Count: 1, Sum: 4},
	}, hists(t, rm, "llmrate.wait.duration"))
	assert.Equal(t, map[string]int64{
		"llmrate.plan=,llmrate.reconcile.kind=usage":     3,
		"llmrate.plan=,llmrate.reconcile.kind=partial":   2,
		"llmrate.plan=,llmrate.reconcile.kind=estimated": 1,
	}, counts(t, rm, "llmrate.reconciles"))
	assert.Equal(t, map[string]int64{
		"gen_ai.token.type=input,llmrate.plan=":  10 + 5 + 7,
		"gen_ai.token.type=output,llmrate.plan=": 20 + 20 + 2,
		"llmrate.plan=":                          100 + 19 + 12,
	}, counts(t, rm, "llmrate.tokens"))
	// Final usage only: 30/40 + 25/10 + 100/50.
	assert.Equal(t, map[string]hist{"": {Count: 3, Sum: 0.75 + 2.5 + 2}}, hists(t, rm, "llmrate.estimate.ratio"))
	assert.Equal(t, map[string]int64{"llmrate.operation=admit,llmrate.plan=": 2, "llmrate.operation=reconcile,llmrate.plan=": 1}, counts(t, rm, "llmrate.fail_opens"))
	assert.Equal(t, map[string]int64{"": 2}, counts(t, rm, "llmrate.evictions"))
}

// TestWindowExact: llmrate.window_ms is the refusing window in whole
// milliseconds, so windows that differ by less than a second are told
// apart (a window is whole milliseconds).
func TestWindowExact(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	for _, w := range []time.Duration{time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond, 2*time.Hour + time.Millisecond} {
		obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyRequests, Window: w, Tier: llmrate.Free})
	}
	const prefix = "llmrate.bucket=key_requests,llmrate.model=,llmrate.plan=,llmrate.result=refused,llmrate.tier=free,"
	assert.Equal(t, map[string]int64{
		prefix + "llmrate.window_ms=1000":    1,
		prefix + "llmrate.window_ms=1500":    2,
		prefix + "llmrate.window_ms=7200001": 1,
	}, counts(t, collect(t, reader), "llmrate.decisions"))
}

// TestCalendarAndSessionRefusals: a calendar window's refusal (Window 0)
// is told by its calendar, a session's by its window and llmrate.session.
func TestCalendarAndSessionRefusals(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyTokens, Calendar: llmrate.CalendarMonth, Zone: "Europe/Berlin", Tier: llmrate.Free})
	obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyRequests, Window: 5 * time.Hour, Session: true, Tier: llmrate.Free})
	assert.Equal(t, map[string]int64{
		"llmrate.bucket=key_tokens,llmrate.calendar=month,llmrate.model=,llmrate.plan=,llmrate.result=refused,llmrate.tier=free":                            1,
		"llmrate.bucket=key_requests,llmrate.model=,llmrate.plan=,llmrate.result=refused,llmrate.session=true,llmrate.tier=free,llmrate.window_ms=18000000": 1,
	}, counts(t, collect(t, reader), "llmrate.decisions"))
}

// TestPlanAndModelNamesCapped (plans, so no llmrate.tier): a plan resolver may answer per workspace,
// so an Observer records the first 256 distinct plan names, and the first
// 256 distinct model entry names, as they are, and any other as "_other";
// a name kept stays its own after the cap is reached, on every
// instrument that carries it.
func TestPlanAndModelNamesCapped(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	for i := range 300 {
		obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: llmrate.Free, Plan: fmt.Sprintf("plan-%d", i), Named: true, Model: fmt.Sprintf("model-%d", i)})
	}
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: llmrate.Free, Plan: "plan-7", Named: true, Model: "model-7"})
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileEstimated, Plan: "plan-7", Estimate: 5, Actual: 5})
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileEstimated, Plan: "plan-new", Estimate: 3, Actual: 3})
	obs.FailedOpen(llmrate.FailOpenEvent{Op: "admit", Plan: "plan-255"})
	obs.FailedOpen(llmrate.FailOpenEvent{Op: "admit", Plan: "plan-256"})

	want := map[string]int64{}
	for i := range 256 {
		want[fmt.Sprintf("llmrate.model=model-%d,llmrate.plan=plan-%d,llmrate.result=allowed", i, i)] = 1
	}
	want["llmrate.model=model-7,llmrate.plan=plan-7,llmrate.result=allowed"] = 2
	want["llmrate.model=_other,llmrate.plan=_other,llmrate.result=allowed"] = 300 - 256
	rm := collect(t, reader)
	assert.Equal(t, want, counts(t, rm, "llmrate.decisions"))
	assert.Equal(t, map[string]int64{
		"llmrate.plan=plan-7,llmrate.reconcile.kind=estimated": 1,
		"llmrate.plan=_other,llmrate.reconcile.kind=estimated": 1,
	}, counts(t, rm, "llmrate.reconciles"))
	assert.Equal(t, map[string]int64{"llmrate.plan=plan-7": 5, "llmrate.plan=_other": 3}, counts(t, rm, "llmrate.tokens"))
	assert.Equal(t, map[string]int64{
		"llmrate.operation=admit,llmrate.plan=plan-255": 1,
		"llmrate.operation=admit,llmrate.plan=_other":   1,
	}, counts(t, rm, "llmrate.fail_opens"))
}

// TestInstrumentUnits: the units the instruments declare.
func TestInstrumentUnits(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Wait: time.Second})
	obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileUsage, Estimate: 1, Actual: 1, Reported: llmrate.Usage{InputTokens: 1}})
	obs.FailedOpen(llmrate.FailOpenEvent{Op: "admit"})
	obs.Evicted()
	rm := collect(t, reader)
	got := map[string]string{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m.Unit
	}
	assert.Equal(t, map[string]string{
		"llmrate.decisions":      "{decision}",
		"llmrate.wait.duration":  "s",
		"llmrate.fail_opens":     "{request}",
		"llmrate.reconciles":     "{reconcile}",
		"llmrate.tokens":         "{token}",
		"llmrate.estimate.ratio": "1",
		"llmrate.evictions":      "{eviction}",
	}, got)
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	_, err := otelrate.New(otelrate.WithMeterProvider(nil))
	assert.Error(t, err)
	_, err = otelrate.New(nil)
	assert.Error(t, err)
	// The default is the global provider (a no-op one unless set).
	obs, err := otelrate.New()
	require.NoError(t, err)
	obs.Decided(llmrate.DecisionEvent{Allowed: true})
}

// usageReply is a mock provider: an OpenAI chat completion reporting
// prompt and completion tokens.
func usageReply(prompt, completion int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, prompt, completion, prompt+completion)
	})
}

func uniform(l llmrate.Limits) llmrate.TierTable {
	return llmrate.TierTable{Free: l, Developer: l, Team: l, Growth: l, Scale: l, Enterprise: l}
}

// failingStore answers every admission with an error: the request fails
// open.
type failingStore struct{}

func (failingStore) Admit(context.Context, llmrate.AdmitRequest) (llmrate.Decision, error) {
	return llmrate.Decision{}, errors.New("connection refused")
}
func (failingStore) Reconcile(context.Context, llmrate.ReconcileRequest) error { return nil }

// TestThroughALimiter: the counts and sums a limiter's traffic makes,
// worked out by hand, and no key, workspace or client-sent model name in
// any attribute.
func TestThroughALimiter(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	clock := llmratetest.NewClock()
	// 2 requests a minute: a full bucket admits 4. The model entry "gpt-4o*"
	// has 1 a minute: 2.
	lim, err := llmrate.New(
		llmrate.WithClock(clock.Now),
		llmrate.WithObserver(obs),
		llmrate.WithWorkspace(llmrate.Header("X-Workspace")),
		llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 2, TokensPerMinute: 100_000})),
		llmrate.WithModel(llmrate.Header("X-Model")),
		llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o*": uniform(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 100_000})}),
	)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, lim.Close(context.Background())) })
	h := lim.Middleware(usageReply(10, 20))
	send := func(key, model string) int {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(strings.Repeat("x", 40)))
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("X-Workspace", "ws-acme-private")
		r.Header.Set("X-Model", model)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	var codes []int
	for range 5 {
		codes = append(codes, send("sk-SECRET-one", "llama-3"))
	}
	for range 3 {
		codes = append(codes, send("sk-SECRET-two", "gpt-4o-mini-2024-07-18"))
	}
	assert.Equal(t, []int{200, 200, 200, 200, 429, 200, 200, 429}, codes)

	// A store fault: the request passes, counted.
	failing, err := llmrate.New(llmrate.WithClock(clock.Now), llmrate.WithObserver(obs), llmrate.WithStore(failingStore{}))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, failing.Close(context.Background())) })
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
	r.Header.Set("Authorization", "Bearer sk-SECRET-three")
	w := httptest.NewRecorder()
	failing.Middleware(usageReply(1, 1)).ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)

	rm := collect(t, reader)
	// The workspace is its own: the workspace's requests bucket (4) is
	// spent by the first key; the model entry's buckets are the entry's own.
	assert.Equal(t, map[string]int64{
		"llmrate.model=,llmrate.plan=free,llmrate.result=allowed,llmrate.tier=free":                                                            4,
		"llmrate.bucket=key_requests,llmrate.model=,llmrate.plan=free,llmrate.result=refused,llmrate.tier=free,llmrate.window_ms=60000":        1,
		"llmrate.model=gpt-4o*,llmrate.plan=free,llmrate.result=allowed,llmrate.tier=free":                                                     2,
		"llmrate.bucket=key_requests,llmrate.model=gpt-4o*,llmrate.plan=free,llmrate.result=refused,llmrate.tier=free,llmrate.window_ms=60000": 1,
	}, counts(t, rm, "llmrate.decisions"))
	// 6 admitted, each a 40-byte body (estimate 10) charged 10 + 20.
	assert.Equal(t, map[string]int64{"llmrate.plan=free,llmrate.reconcile.kind=usage": 6}, counts(t, rm, "llmrate.reconciles"))
	assert.Equal(t, map[string]int64{"gen_ai.token.type=input,llmrate.plan=free": 60, "gen_ai.token.type=output,llmrate.plan=free": 120}, counts(t, rm, "llmrate.tokens"))
	assert.Equal(t, map[string]hist{"": {Count: 6, Sum: 18}}, hists(t, rm, "llmrate.estimate.ratio"))
	assert.Equal(t, map[string]int64{"llmrate.operation=admit,llmrate.plan=free": 1}, counts(t, rm, "llmrate.fail_opens"))

	// No identity in any attribute.
	var values []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			values = append(values, attributeValues(m)...)
		}
	}
	sort.Strings(values)
	for _, v := range values {
		for _, secret := range []string{"SECRET", "sk-", "acme", "llama", "mini"} {
			assert.NotContains(t, v, secret)
		}
	}
}

// attributeValues returns every attribute value of m's data points.
func attributeValues(m metricdata.Metrics) []string {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	}
	var out []string
	for _, s := range sets {
		for _, kv := range s.ToSlice() {
			out = append(out, string(kv.Key)+"="+kv.Value.String())
		}
	}
	return out
}

// TestMeasurementsAllocs: once an attribute set has been seen, recording
// an event allocates nothing (the observer runs on every request).
func TestMeasurementsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: allocations are not the program's")
	}
	obs, _ := newObserver(t)
	events := []func(){
		func() {
			obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: llmrate.Team, Plan: "team", Model: "gpt-4o*"})
		},
		func() { obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyTokens, Tier: llmrate.Free}) },
		func() { obs.Decided(llmrate.DecisionEvent{Allowed: true, Plan: "pro", Wait: time.Second}) },
		func() {
			obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileUsage, Plan: "pro", Estimate: 10, Actual: 30, Reported: llmrate.Usage{InputTokens: 10, OutputTokens: 20}})
		},
		func() {
			obs.Reconciled(llmrate.ReconcileEvent{Kind: llmrate.ReconcileEstimated, Estimate: 10, Actual: 12})
		},
		func() { obs.FailedOpen(llmrate.FailOpenEvent{Op: "admit", Plan: "pro"}) },
		obs.Evicted,
	}
	for i, ev := range events {
		ev()
		assert.Zero(t, testing.AllocsPerRun(100, ev), "event %d", i)
	}
}

// TestNoTierUnderPlans: under plans (DecisionEvent.Named) llmrate.tier is
// not recorded, whatever the plan's name: the event's Tier means nothing
// there.
func TestNoTierUnderPlans(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: llmrate.Free, Plan: "pro", Named: true})
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: llmrate.Free, Plan: "free", Named: true})
	obs.Decided(llmrate.DecisionEvent{Allowed: true, Tier: llmrate.Growth, Plan: "growth"})
	assert.Equal(t, map[string]int64{
		"llmrate.model=,llmrate.plan=pro,llmrate.result=allowed":                        1,
		"llmrate.model=,llmrate.plan=free,llmrate.result=allowed":                       1,
		"llmrate.model=,llmrate.plan=growth,llmrate.result=allowed,llmrate.tier=growth": 1,
	}, counts(t, collect(t, reader), "llmrate.decisions"))
}

// TestWindowLengthsCapped: a resolver may answer windows per workspace, so
// the distinct llmrate.window_ms values are capped at 256; past them a
// refusal goes without the attribute.
func TestWindowLengthsCapped(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	for i := range 1000 {
		obs.Decided(llmrate.DecisionEvent{Refused: llmrate.KeyRequests, Window: time.Duration(i+1) * time.Second, Tier: llmrate.Free})
	}
	got := counts(t, collect(t, reader), "llmrate.decisions")
	assert.Len(t, got, 257, "256 lengths and one series without")
	assert.Equal(t, int64(1000-256), got["llmrate.bucket=key_requests,llmrate.model=,llmrate.plan=,llmrate.result=refused,llmrate.tier=free"])
}
