package llmrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// modelHeaderExtractor reads the model from X-Model (tests only).
func modelHeaderExtractor(r *http.Request) (string, error) { return r.Header.Get("X-Model"), nil }

// sendAs sends one request for key (workspace from X-WS when configured)
// naming model.
func (h *harness) sendAs(key, ws, model string, contentLength int64) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
	r.ContentLength = contentLength
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("X-WS", ws)
	if model != "" {
		r.Header.Set("X-Model", model)
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

func wsFromHeader(r *http.Request) (string, error) {
	if ws := r.Header.Get("X-WS"); ws != "" {
		return ws, nil
	}
	return "", llmrate.ErrNoWorkspace
}

func TestModelLimitsValidated(t *testing.T) {
	t.Parallel()
	good := uniform(llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 100})
	bad := good
	bad.Scale.TokensPerMinute = 0
	for name, m := range map[string]llmrate.ModelLimits{
		"empty name":       {"": good},
		"star inside":      {"gpt-*-mini": good},
		"two stars":        {"gpt**": good},
		"zero figure":      {"gpt-4o": bad},
		"above the bound":  {"gpt-4o": uniform(llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute + 1, TokensPerMinute: 1})},
		"one bad of three": {"a": good, "b*": good, "c": bad},
	} {
		_, err := llmrate.New(llmrate.WithModel(modelHeaderExtractor), llmrate.WithModelLimits(m))
		var ce *llmrate.ConfigError
		require.ErrorAs(t, err, &ce, name)
		assert.Equal(t, "WithModelLimits", ce.Option, name)
	}
	_, err := llmrate.New(llmrate.WithModel(modelHeaderExtractor), llmrate.WithModelLimits(llmrate.ModelLimits{"*": good, "gpt-4o*": good, "gpt-4o": good}))
	assert.NoError(t, err)
	_, err = llmrate.New(llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o": good}))
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce, "model limits without WithModel")
	assert.ErrorContains(t, err, "needs WithModel")
	for name, o := range map[string]llmrate.Option{"WithModel": llmrate.WithModel(nil), "WithOverrides": llmrate.WithOverrides(nil)} {
		_, err := llmrate.New(o)
		var ce *llmrate.ConfigError
		require.ErrorAs(t, err, &ce, name)
		assert.Equal(t, name, ce.Option)
	}
}

// The longest prefix wins, an exact entry wins over every prefix, and a
// model with no entry (or no model) spends the default buckets.
func TestModelLimitsMatching(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, okHandler, llmrate.WithModel(modelHeaderExtractor), llmrate.WithObserver(rec),
		llmrate.WithModelLimits(llmrate.ModelLimits{
			"*":         uniform(llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: 1000}),
			"gpt-*":     uniform(llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: 1000}),
			"gpt-4o*":   uniform(llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: 1000}),
			"gpt-4o":    uniform(llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: 1000}),
			"gpt-4o-mi": uniform(llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: 1000}),
		}))
	for _, model := range []string{"gpt-4o", "gpt-4o-mini", "gpt-4o-mi", "gpt-3.5-turbo", "claude", ""} {
		require.Equal(t, http.StatusOK, h.sendAs("sk-match", "", model, 0).Code)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []string
	for _, d := range rec.decisions {
		got = append(got, d.Model)
	}
	assert.Equal(t, []string{"gpt-4o", "gpt-4o*", "gpt-4o-mi", "gpt-*", "*", ""}, got)
}

func TestModelRefusalMessageAndHeaders(t *testing.T) {
	t.Parallel()
	models := llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o*": uniform(llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000})})
	for _, style := range []llmrate.HeaderStyle{llmrate.HeadersOpenAI, llmrate.HeadersIETF} {
		h := newHarness(t, okHandler, llmrate.WithModel(modelHeaderExtractor), models,
			llmrate.WithWorkspace(wsFromHeader), llmrate.WithRateLimitHeaders(style))
		w := h.sendAs("k1", "team", "gpt-4o-2024-08-06", 4*1500) // 1,500 of 2,000 tokens
		require.Equal(t, http.StatusOK, w.Code)
		if style == llmrate.HeadersOpenAI {
			assert.Equal(t, "20", w.Header().Get(llmrate.HeaderLimitRequests), "the model's capacity: 2×10")
			assert.Equal(t, "19", w.Header().Get(llmrate.HeaderRemainingRequests))
			assert.Equal(t, "2000", w.Header().Get(llmrate.HeaderLimitTokens))
			assert.Equal(t, "500", w.Header().Get(llmrate.HeaderRemainingTokens))
		} else {
			assert.Equal(t, `"requests";q=20;w=120, "tokens";q=2000;w=120`, w.Header().Get(llmrate.HeaderRateLimitPolicy))
		}
		w = h.sendAs("k2", "team", "gpt-4o-mini", 4*600) // k2's own buckets have room; the workspace's do not
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		// 100 tokens short at 1,000/min: 6 s.
		assert.Equal(t, "Rate limit reached for gpt-4o* in this workspace on tokens per minute on the free tier: limit 1000 per minute, burst 2000. Please try again in 6s.",
			decodeErr(t, w).Error.Message)
		if style == llmrate.HeadersOpenAI {
			assert.Equal(t, "500", w.Header().Get(llmrate.HeaderRemainingTokens), "the binding bucket: the workspace's for the model")
		}
		w = h.sendAs("k2", "team", "gpt-4o", 4*2001)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Contains(t, decodeErr(t, w).Error.Message, "Request too large for gpt-4o*'s tokens per minute (key)")
		assert.Equal(t, "60", w.Header().Get("Retry-After"))
		w = h.sendAs("k1", "team", "o3", 4*1500)
		assert.Equal(t, http.StatusOK, w.Code, "a model without an entry spends the default buckets")
	}
}

func TestModelBadExtractor(t *testing.T) {
	t.Parallel()
	models := llmrate.WithModelLimits(llmrate.ModelLimits{"o3": uniform(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 10})})
	h := newHarness(t, okHandler, models, llmrate.WithModel(func(*http.Request) (string, error) { return "", errors.New("unreadable") }))
	w := h.send("sk-x", 0)
	require.Equal(t, http.StatusBadRequest, w.Code)
	assert.Equal(t, "invalid_model", decodeErr(t, w).Error.Code)

	h = newHarness(t, okHandler, models, llmrate.WithModel(func(*http.Request) (string, error) { panic("boom") }))
	assert.Equal(t, http.StatusOK, h.send("sk-x", 0).Code, "a panicking extractor fails open")
	assert.Equal(t, int64(1), h.lim.FailOpens())
}

func limitsOf(t *testing.T, l *llmrate.Limiter, key string) map[string]any {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/limits", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("X-WS", key)
	w := httptest.NewRecorder()
	l.LimitsHandler().ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	return got
}

func jsonMap(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

func TestLimitsEndpointModelsAndOverrides(t *testing.T) {
	t.Parallel()
	tiers := llmrate.StaticTiers{"sk-dev": llmrate.Developer, "sk-ent": llmrate.Enterprise, "sk-ent-o": llmrate.Enterprise}
	gpt := uniform(llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 30_000})
	gpt.Developer = llmrate.Limits{RequestsPerMinute: 700, TokensPerMinute: 70_000}
	over := llmrate.OverrideResolverFunc(func(_ context.Context, ws string) (llmrate.Limits, bool) {
		switch ws {
		case "sk-ent-o", "sk-free-o":
			return llmrate.Limits{RequestsPerMinute: 12_345, TokensPerMinute: 6_789_000}, true
		case "sk-bad":
			return llmrate.Limits{RequestsPerMinute: 0, TokensPerMinute: 1}, true
		}
		return llmrate.Limits{}, false
	})
	l, err := llmrate.New(llmrate.WithTierResolver(tiers), llmrate.WithOverrides(over), llmrate.WithModel(modelHeaderExtractor),
		llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o*": gpt, "o3": uniform(llmrate.Limits{RequestsPerMinute: 5, TokensPerMinute: 9})}))
	require.NoError(t, err)
	docs := "" // no link by default
	assert.Equal(t, jsonMap(t, `{"tier":"developer","requestsPerMin":1000,"tokensPerMin":2000000`+docs+`,
		"models":{"gpt-4o*":{"requestsPerMin":700,"tokensPerMin":70000},"o3":{"requestsPerMin":5,"tokensPerMin":9}}}`), limitsOf(t, l, "sk-dev"))
	assert.Equal(t, jsonMap(t, `{"tier":"enterprise","requestsPerMin":null,"tokensPerMin":null,"note":"`+llmrate.EnterpriseNote+`"`+docs+`,
		"models":{"gpt-4o*":{"requestsPerMin":null,"tokensPerMin":null},"o3":{"requestsPerMin":null,"tokensPerMin":null}}}`), limitsOf(t, l, "sk-ent"))
	assert.Equal(t, jsonMap(t, `{"tier":"enterprise","requestsPerMin":12345,"tokensPerMin":6789000`+docs+`,
		"models":{"gpt-4o*":{"requestsPerMin":null,"tokensPerMin":null},"o3":{"requestsPerMin":null,"tokensPerMin":null}}}`), limitsOf(t, l, "sk-ent-o"),
		"an override is reported for Enterprise too: a configured figure is not a guess")
	assert.Equal(t, jsonMap(t, `{"tier":"free","requestsPerMin":12345,"tokensPerMin":6789000`+docs+`,
		"models":{"gpt-4o*":{"requestsPerMin":500,"tokensPerMin":30000},"o3":{"requestsPerMin":5,"tokensPerMin":9}}}`), limitsOf(t, l, "sk-free-o"))

	r := httptest.NewRequest(http.MethodGet, "/limits", nil)
	r.Header.Set("Authorization", "Bearer sk-bad")
	w := httptest.NewRecorder()
	l.LimitsHandler().ServeHTTP(w, r)
	assert.Equal(t, http.StatusInternalServerError, w.Code, "an invalid override is a fault, never a guess")
	assert.Equal(t, int64(1), l.FailOpens())

	plain, err := llmrate.New()
	require.NoError(t, err)
	assert.NotContains(t, limitsOf(t, plain, "sk-x"), "models", "no model limits: no models member")
}

// overrideTable is a concurrency-safe, changeable override per workspace.
type overrideTable struct {
	m atomic.Pointer[map[string]llmrate.Limits]
}

func (o *overrideTable) Override(_ context.Context, ws string) (llmrate.Limits, bool) {
	if p := o.m.Load(); p != nil {
		l, ok := (*p)[ws]
		return l, ok
	}
	return llmrate.Limits{}, false
}

func (o *overrideTable) set(ws string, l llmrate.Limits) {
	next := map[string]llmrate.Limits{}
	if p := o.m.Load(); p != nil {
		for k, v := range *p {
			next[k] = v
		}
	}
	next[ws] = l
	o.m.Store(&next)
}

func (o *overrideTable) del(ws string) {
	next := map[string]llmrate.Limits{}
	if p := o.m.Load(); p != nil {
		for k, v := range *p {
			next[k] = v
		}
	}
	delete(next, ws)
	o.m.Store(&next)
}

func TestOverrides(t *testing.T) {
	t.Parallel()
	t.Run("WorkspaceAndKeys", func(t *testing.T) {
		t.Parallel()
		o := &overrideTable{}
		o.set("acme", llmrate.Limits{RequestsPerMinute: 3, TokensPerMinute: 1000})
		h := newHarness(t, okHandler, llmrate.WithOverrides(o), llmrate.WithWorkspace(wsFromHeader))
		n := 0
		for range 10 {
			if h.sendAs("k1", "acme", "", 0).Code == http.StatusOK {
				n++
			}
		}
		assert.Equal(t, 6, n, "one key may use the whole override (2×3)")
		assert.Equal(t, http.StatusTooManyRequests, h.sendAs("k2", "acme", "", 0).Code, "the workspace is spent")
		assert.Equal(t, http.StatusOK, h.sendAs("k3", "other", "", 0).Code, "other workspaces keep their tier")
		w := h.sendAs("k1", "acme", "", 0)
		assert.Contains(t, decodeErr(t, w).Error.Message, "Rate limit reached for requests per minute (key) under this workspace's own limits: limit 3 per minute, burst 6.")
	})
	t.Run("KeyTiersCapLower", func(t *testing.T) {
		t.Parallel()
		o := &overrideTable{}
		o.set("acme", llmrate.Limits{RequestsPerMinute: 3, TokensPerMinute: 1000})
		keyTiers := uniform(llmrate.Limits{RequestsPerMinute: 2, TokensPerMinute: 1_000_000})
		h := newHarness(t, okHandler, llmrate.WithOverrides(o), llmrate.WithWorkspace(wsFromHeader), llmrate.WithKeyTiers(keyTiers),
			llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
		n := 0
		for range 10 {
			if h.sendAs("k1", "acme", "", 0).Code == http.StatusOK {
				n++
			}
		}
		assert.Equal(t, 4, n, "the key tier's 2/min caps the key below the override's 3/min")
		w := h.sendAs("k2", "acme", "", 4*1200)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "796", w.Header().Get(llmrate.HeaderRemainingTokens), "the workspace's 2,000 less 4 less 1,200")
		assert.Equal(t, "1", w.Header().Get(llmrate.HeaderRemainingRequests), "the workspace's 6 less 5")
		w = h.sendAs("k3", "acme", "", 4*2001)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Contains(t, decodeErr(t, w).Error.Message, "tokens per minute (key)", "the key's tokens: the override's 1,000/min caps the key tier's 1,000,000")
	})
	t.Run("ChangeKeepsLevel", func(t *testing.T) {
		t.Parallel()
		o := &overrideTable{}
		o.set("sk-c", llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000})
		h := newHarness(t, okHandler, llmrate.WithOverrides(o))
		for range 5 {
			require.Equal(t, http.StatusOK, h.send("sk-c", 0).Code)
		}
		o.set("sk-c", llmrate.Limits{RequestsPerMinute: 3, TokensPerMinute: 1000})
		assert.Equal(t, 6, h.burst("sk-c", 20), "15 left, clamped to the new capacity of 6")
		o.set("sk-c", llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000})
		assert.Equal(t, 0, h.burst("sk-c", 20), "no reset and no free refill on raising it")
		h.clock.Advance(6 * time.Second) // 10/min: one per 6 s
		assert.Equal(t, 1, h.burst("sk-c", 20))
	})
	t.Run("InvalidFailsOpen", func(t *testing.T) {
		t.Parallel()
		for _, bad := range []llmrate.Limits{
			{RequestsPerMinute: 0, TokensPerMinute: 1000},
			{RequestsPerMinute: 10, TokensPerMinute: -5},
			{RequestsPerMinute: llmrate.MaxPerMinute + 1, TokensPerMinute: 1000},
		} {
			o := &overrideTable{}
			o.set("sk-secret-key", bad)
			rec := &recorder{}
			core, logs := observer.New(zapcore.DebugLevel)
			h := newHarness(t, okHandler, llmrate.WithOverrides(o), llmrate.WithObserver(rec), llmrate.WithLogger(zap.New(core)))
			for range 3 {
				assert.Equal(t, http.StatusOK, h.send("sk-secret-key", 0).Code)
			}
			assert.Equal(t, int64(3), h.lim.FailOpens(), "%+v", bad)
			rec.mu.Lock()
			require.Len(t, rec.failOpens, 3)
			assert.ErrorIs(t, rec.failOpens[0].Err, llmrate.ErrInvalidOverride)
			assert.Empty(t, rec.decisions, "no decision was made")
			rec.mu.Unlock()
			entries := logs.FilterMessage("llmrate: failing open").All()
			require.Len(t, entries, 3)
			for _, e := range entries {
				for _, f := range e.Context {
					assert.NotContains(t, f.String+errString(f), "sk-secret-key")
				}
			}
		}
		o := &overrideTable{}
		o.set("sk-ok", llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1000})
		h := newHarness(t, okHandler, llmrate.WithOverrides(o))
		assert.Equal(t, 2, h.burst("sk-ok", 10), "a valid override on the same limiter is enforced")
	})
	t.Run("PanicFailsOpen", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, okHandler, llmrate.WithOverrides(llmrate.OverrideResolverFunc(func(context.Context, string) (llmrate.Limits, bool) { panic("resolver down") })))
		assert.Equal(t, http.StatusOK, h.send("sk-p", 0).Code)
		assert.Equal(t, int64(1), h.lim.FailOpens())
	})
	t.Run("ModelEntriesKeepTheirFigures", func(t *testing.T) {
		t.Parallel()
		o := &overrideTable{}
		o.set("sk-m", llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 1000})
		h := newHarness(t, okHandler, llmrate.WithOverrides(o), llmrate.WithModel(modelHeaderExtractor),
			llmrate.WithModelLimits(llmrate.ModelLimits{"o3": uniform(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1000})}))
		n := 0
		for range 5 {
			if h.sendAs("sk-m", "", "o3", 0).Code == http.StatusOK {
				n++
			}
		}
		assert.Equal(t, 2, n, "the entry's 1/min, not the override's 100/min")
	})
}

func errString(f zapcore.Field) string {
	if err, ok := f.Interface.(error); ok {
		return err.Error()
	}
	return ""
}

func TestShadow(t *testing.T) {
	t.Parallel()
	tiny := uniform(llmrate.Limits{RequestsPerMinute: 2, TokensPerMinute: 1000})
	rec := &recorder{}
	core, logs := observer.New(zapcore.DebugLevel)
	store := llmrate.NewMemoryStore()
	h := newHarness(t, usageHandler(70, 30), llmrate.WithShadow(), llmrate.WithTiers(tiny), llmrate.WithObserver(rec),
		llmrate.WithLogger(zap.New(core)), llmrate.WithStore(store), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
	var remaining []string
	for range 6 {
		w := h.send("sk-s", 4)
		require.Equal(t, http.StatusOK, w.Code, "shadow mode refuses nothing")
		assert.Empty(t, w.Header().Get("Retry-After"))
		remaining = append(remaining, w.Header().Get(llmrate.HeaderRemainingRequests))
	}
	// Four admitted (the burst of 2×2 requests), each charged 100 tokens.
	assert.Equal(t, []string{"3", "2", "1", "0", "0", "0"}, remaining, "the headers show what enforcement would")
	rec.mu.Lock()
	var allowed []bool
	for _, d := range rec.decisions {
		assert.True(t, d.Shadow)
		allowed = append(allowed, d.Allowed)
	}
	assert.Equal(t, []bool{true, true, true, true, false, false}, allowed)
	assert.Len(t, rec.reconciles, 4, "the let-through requests are not reconciled")
	rec.mu.Unlock()
	assert.Equal(t, int64(2), h.lim.ShadowRefusals())
	assert.Equal(t, 2, logs.FilterMessage("llmrate: would refuse (shadow)").Len())
	lv := store.Levels("sk-s", "sk-s", tiny.Free, tiny.Free, h.clock.Now())
	assert.Equal(t, [4]int64{0, 2000 - 4*100, 0, 2000 - 4*100}, lv, "only the admitted requests were debited and reconciled")
}

// ModelLevels reads a model entry's buckets, apart from the default ones.
func TestMemoryStoreModelLevels(t *testing.T) {
	t.Parallel()
	store := llmrate.NewMemoryStore()
	lim := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
	h := newHarness(t, usageHandler(300, 200), llmrate.WithStore(store), llmrate.WithModel(modelHeaderExtractor),
		llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o*": uniform(lim)}))
	require.Equal(t, http.StatusOK, h.sendAs("sk-l", "", "gpt-4o-mini", 4*100).Code)
	free := llmrate.DefaultTiers().Free
	assert.Equal(t, [4]int64{19, 1500, 19, 1500}, store.ModelLevels("sk-l", "sk-l", "gpt-4o*", lim, lim, h.clock.Now()), "charged 500, in the entry's buckets")
	assert.Equal(t, [4]int64{200, 400_000, 200, 400_000}, store.Levels("sk-l", "sk-l", free, free, h.clock.Now()), "the default buckets are untouched")
}
