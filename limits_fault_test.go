package llmrate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestLimitsEndpointResolverPanics: issue 18 item 13. When the tier
// resolver (or the override resolver) panics, the limits endpoint cannot
// know the caller's figures: it answers 500, never Free's figures as a
// guess, and the fault is counted (FailOpens), reported to the observer
// and logged, without the raw key.
func TestLimitsEndpointResolverPanics(t *testing.T) {
	t.Parallel()
	panicTier := llmrate.WithTierResolver(llmrate.TierResolverFunc(func(context.Context, string) (llmrate.Tier, bool) {
		panic("tier lookup failed")
	}))
	panicOverride := llmrate.WithOverrides(llmrate.OverrideResolverFunc(func(context.Context, string) (llmrate.Limits, bool) {
		panic("override lookup failed")
	}))
	for _, c := range []struct {
		name  string
		opt   llmrate.Option
		where string
	}{
		{"tier resolver", panicTier, "tier resolver"},
		{"override resolver", panicOverride, "override resolver"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			obs := &recorder{}
			core, logs := observer.New(zapcore.WarnLevel)
			l, err := llmrate.New(c.opt, llmrate.WithObserver(obs), llmrate.WithLogger(zap.New(core)))
			require.NoError(t, err)
			r := httptest.NewRequest(http.MethodGet, "/platform/v1/limits", nil)
			r.Header.Set("Authorization", "Bearer sk-limits-secret")
			w := httptest.NewRecorder()
			l.LimitsHandler().ServeHTTP(w, r)
			require.Equal(t, http.StatusInternalServerError, w.Code, "a fault, never a guess: %s", w.Body.String())
			var body map[string]any
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			assert.NotContains(t, body, "tier")
			assert.NotContains(t, body, "requestsPerMin")
			assert.Equal(t, int64(1), l.FailOpens(), "counted")
			require.Len(t, obs.failOpens, 1)
			assert.Equal(t, "limits", obs.failOpens[0].Op)
			var pe *llmrate.PanicError
			require.ErrorAs(t, obs.failOpens[0].Err, &pe)
			assert.Equal(t, c.where, pe.Where)
			require.Equal(t, 1, logs.Len(), "logged")
			for k, v := range logs.All()[0].ContextMap() {
				assert.NotContains(t, toString(v), "sk-limits-secret", "log field %s", k)
			}
		})
	}
}
