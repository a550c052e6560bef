package llmrate_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// costCall is one call of a cost function under test.
type costCall struct {
	model string
	u     usage.Usage
}

// costSpy records its calls and returns f's result.
type costSpy struct {
	mu    sync.Mutex
	calls []costCall
	f     func(string, usage.Usage) int64
}

func (s *costSpy) cost(model string, u usage.Usage) int64 {
	s.mu.Lock()
	s.calls = append(s.calls, costCall{model, u})
	s.mu.Unlock()
	return s.f(model, u)
}

// costLimits are roomy figures, so that levels show charges, not refusals;
// a bucket holds twice its per-minute figure (costBurst) when full.
var costLimits = llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1_000_000}

const costBurst = 2 * 1_000_000

// postBody sends body (its Content-Length declared) for key, with headers
// in pairs.
func postBody(h http.Handler, key, body string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestTokenCostNil(t *testing.T) {
	t.Parallel()
	_, err := llmrate.New(llmrate.WithTokenCost(nil))
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "WithTokenCost", ce.Option)
}

// A response with final usage is charged what the cost function returns
// for that usage and the request's model: in the ReconcileEvent and in the
// bucket levels.
func TestTokenCostFinalUsage(t *testing.T) {
	t.Parallel()
	spy := &costSpy{f: func(_ string, u usage.Usage) int64 { return u.InputTokens + 4*u.OutputTokens }}
	rec := &recorder{}
	store := llmrate.NewMemoryStore()
	h := newHarness(t, usageHandler(300, 50), llmrate.WithTiers(uniform(costLimits)), llmrate.WithStore(store),
		llmrate.WithModel(llmrate.Header("X-Model")), llmrate.WithTokenCost(spy.cost), llmrate.WithObserver(rec))
	body := strings.Repeat("x", 400) // estimate 100
	require.Equal(t, http.StatusOK, postBody(h.h, "sk-cost", body, "X-Model", "o3").Code)

	require.Len(t, spy.calls, 1)
	assert.Equal(t, costCall{"o3", usage.Usage{InputTokens: 300, OutputTokens: 50}}, spy.calls[0])
	require.Len(t, rec.reconciles, 1)
	ev := rec.reconciles[0]
	assert.Equal(t, llmrate.ReconcileUsage, ev.Kind)
	assert.Equal(t, int64(100), ev.Estimate)
	assert.Equal(t, int64(300+4*50), ev.Actual)
	lv := store.Levels("sk-cost", "sk-cost", costLimits, costLimits, h.clock.Now())
	assert.Equal(t, int64(costBurst-500), lv[llmrate.KeyTokens], "the bucket paid the cost function's charge")
}

// Without WithModel the model is "", and the cost function still runs.
func TestTokenCostWithoutModel(t *testing.T) {
	t.Parallel()
	spy := &costSpy{f: func(_ string, u usage.Usage) int64 { return u.Total() }}
	h := newHarness(t, usageHandler(10, 20), llmrate.WithTokenCost(spy.cost))
	require.Equal(t, http.StatusOK, postBody(h.h, "sk-nomodel", "{}", "X-Model", "gpt-4o").Code)
	require.Len(t, spy.calls, 1)
	assert.Equal(t, "", spy.calls[0].model)
}

// With a cost function and no model limits, the model extractor runs, and
// its error is the 400 it is with model limits.
func TestTokenCostRunsTheModelExtractor(t *testing.T) {
	t.Parallel()
	spy := &costSpy{f: func(_ string, u usage.Usage) int64 { return u.Total() }}
	reached := false
	h := newHarness(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }),
		llmrate.WithModel(llmrate.ModelFromBody()), llmrate.WithTokenCost(spy.cost))
	require.Equal(t, http.StatusOK, postBody(h.h, "sk-x", `{"Model":"claude-sonnet-4"}`).Code)
	require.Len(t, spy.calls, 1)
	assert.Equal(t, "claude-sonnet-4", spy.calls[0].model)

	reached = false
	w := postBody(h.h, "sk-x", `{"model":"a","model":"b"}`)
	require.Equal(t, http.StatusBadRequest, w.Code)
	assert.Equal(t, "invalid_model", decodeErr(t, w).Error.Code)
	assert.False(t, reached)
}

// Partial and estimated charges pass the Usage the charge rule builds:
// input the estimate when none was reported, output the generated text's
// bytes ÷ 4 when larger than any reported.
func TestTokenCostEstimatedAndPartial(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("y", 403) // ⌊403/4⌋ = 100
	noUsage := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"`+text+`"}}]}`)
	})
	// Anthropic's message_start alone: partial, input reported.
	partial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":70,\"output_tokens\":1}}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\""+text+"\"}}\n\n")
	})
	for _, c := range []struct {
		name string
		next http.Handler
		kind llmrate.ReconcileKind
		want usage.Usage
	}{
		{"estimated", noUsage, llmrate.ReconcileEstimated, usage.Usage{InputTokens: 250, OutputTokens: 100}},
		{"partial", partial, llmrate.ReconcilePartial, usage.Usage{InputTokens: 70, OutputTokens: 100}},
	} {
		spy := &costSpy{f: func(_ string, u usage.Usage) int64 { return 2 * u.Total() }}
		rec := &recorder{}
		h := newHarness(t, c.next, llmrate.WithTiers(uniform(costLimits)), llmrate.WithTokenCost(spy.cost), llmrate.WithObserver(rec))
		require.Equal(t, http.StatusOK, postBody(h.h, "sk-p", strings.Repeat("z", 1000)).Code, c.name) // estimate 250
		require.Len(t, spy.calls, 1, c.name)
		assert.Equal(t, c.want, spy.calls[0].u, c.name)
		require.Len(t, rec.reconciles, 1)
		assert.Equal(t, c.kind, rec.reconciles[0].Kind, c.name)
		assert.Equal(t, 2*c.want.Total(), rec.reconciles[0].Actual, c.name)
	}
}

// A negative cost counts as 0: the whole estimate is credited back.
func TestTokenCostNegative(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	store := llmrate.NewMemoryStore()
	h := newHarness(t, usageHandler(100, 100), llmrate.WithTiers(uniform(costLimits)), llmrate.WithStore(store), llmrate.WithObserver(rec),
		llmrate.WithTokenCost(func(string, usage.Usage) int64 { return -1 << 40 }))
	require.Equal(t, http.StatusOK, postBody(h.h, "sk-neg", strings.Repeat("x", 4000)).Code)
	require.Len(t, rec.reconciles, 1)
	assert.Equal(t, int64(0), rec.reconciles[0].Actual)
	lv := store.Levels("sk-neg", "sk-neg", costLimits, costLimits, h.clock.Now())
	assert.Equal(t, int64(costBurst), lv[llmrate.KeyTokens], "the estimate of 1000 was credited back, nothing more")
}

// A panic in the cost function is a limiter fault: the estimate stands,
// counted by FailOpens, logged, reported to the observer.
func TestTokenCostPanic(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.WarnLevel)
	rec := &recorder{}
	store := llmrate.NewMemoryStore()
	h := newHarness(t, usageHandler(5000, 5000), llmrate.WithTiers(uniform(costLimits)), llmrate.WithStore(store), llmrate.WithObserver(rec),
		llmrate.WithLogger(zap.New(core)), llmrate.WithTokenCost(func(string, usage.Usage) int64 { panic("pricing table missing") }))
	w := postBody(h.h, "sk-panic", strings.Repeat("x", 400))
	require.Equal(t, http.StatusOK, w.Code, "the response is untouched")
	assert.Equal(t, int64(1), h.lim.FailOpens())
	require.Len(t, rec.reconciles, 1)
	assert.Equal(t, int64(100), rec.reconciles[0].Actual, "the estimate stands")
	require.Len(t, rec.failOpens, 1)
	var pe *llmrate.PanicError
	require.True(t, errors.As(rec.failOpens[0].Err, &pe))
	assert.Equal(t, "reconcile", rec.failOpens[0].Op)
	assert.Equal(t, 1, logs.FilterMessage("llmrate: failing open").Len())
	lv := store.Levels("sk-panic", "sk-panic", costLimits, costLimits, h.clock.Now())
	assert.Equal(t, int64(costBurst-100), lv[llmrate.KeyTokens])
}
