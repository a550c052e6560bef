package llmrate_test

import (
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// badWindows are Limits.Windows that §18 rules out, by what is wrong.
func badWindows() map[string][]llmrate.Window {
	day := 24 * time.Hour
	return map[string][]llmrate.Window{
		"Per below a second":       {{Per: 999 * time.Millisecond, Requests: 1}},
		"Per zero":                 {{Requests: 1}},
		"Per above 744 h":          {{Per: 744*time.Hour + time.Millisecond, Requests: 1}},
		"Per not whole ms":         {{Per: time.Second + time.Microsecond, Requests: 1}},
		"negative requests":        {{Per: day, Requests: -1}},
		"negative tokens":          {{Per: day, Tokens: -1}},
		"negative input":           {{Per: day, InputTokens: -1}},
		"negative output":          {{Per: day, OutputTokens: -1}},
		"figure above 10^12":       {{Per: day, Tokens: 1_000_000_000_001}},
		"all four figures 0":       {{Per: day}},
		"two windows with one Per": {{Per: day, Requests: 1}, {Per: day, Tokens: 5}},
		"five windows": {{Per: time.Second, Requests: 1}, {Per: time.Minute, Requests: 1}, {Per: time.Hour, Requests: 1},
			{Per: day, Requests: 1}, {Per: 2 * day, Requests: 1}},
	}
}

func TestWindowsValidatedWhereverLimitsAre(t *testing.T) {
	t.Parallel()
	base := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
	for name, ws := range badWindows() {
		bad := base
		bad.Windows = ws
		tiers := llmrate.DefaultTiers()
		tiers.Growth = bad
		for opt, o := range map[string]llmrate.Option{
			"WithTiers":       llmrate.WithTiers(tiers),
			"WithKeyTiers":    llmrate.WithKeyTiers(tiers),
			"WithModelLimits": llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o": tiers}),
		} {
			_, err := llmrate.New(llmrate.WithModel(modelHeaderExtractor), o)
			var ce *llmrate.ConfigError
			require.ErrorAs(t, err, &ce, "%s: %s", opt, name)
			assert.Equal(t, opt, ce.Option, name)
		}
	}
	// The bounds themselves are valid, as are four windows and a window
	// limiting one meter.
	good := base
	good.Windows = []llmrate.Window{{Per: time.Second, Requests: 1}, {Per: 744 * time.Hour, Tokens: llmrate.MaxPerMinute},
		{Per: 1500 * time.Millisecond, InputTokens: 1}, {Per: 24 * time.Hour, OutputTokens: 7}}
	_, err := llmrate.New(llmrate.WithTiers(uniform(good)))
	assert.NoError(t, err)
}

// An override whose windows are invalid fails that request open, counted,
// as any invalid override figure.
func TestInvalidOverrideWindowsFailOpen(t *testing.T) {
	t.Parallel()
	for name, ws := range badWindows() {
		o := &overrideTable{}
		o.set("sk-secret-key", llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000, Windows: ws})
		rec := &recorder{}
		core, logs := observer.New(zapcore.DebugLevel)
		h := newHarness(t, okHandler, llmrate.WithOverrides(o), llmrate.WithObserver(rec), llmrate.WithLogger(zap.New(core)))
		assert.Equal(t, 200, h.send("sk-secret-key", 0).Code, name)
		assert.Equal(t, int64(1), h.lim.FailOpens(), name)
		rec.mu.Lock()
		require.Len(t, rec.failOpens, 1, name)
		assert.ErrorIs(t, rec.failOpens[0].Err, llmrate.ErrInvalidOverride, name)
		rec.mu.Unlock()
		assert.Len(t, logs.FilterMessage("llmrate: failing open").All(), 1, name)
	}
}

func TestWindowBucketNames(t *testing.T) {
	t.Parallel()
	// The existing constants keep their values; the four meters follow.
	assert.Equal(t, llmrate.Bucket(5), llmrate.WorkspaceConcurrent)
	for b, want := range map[llmrate.Bucket][3]string{
		llmrate.KeyRequests:           {"key_requests", "key", "requests"},
		llmrate.WorkspaceTokens:       {"workspace_tokens", "workspace", "tokens"},
		llmrate.KeyConcurrent:         {"key_concurrent", "key", "concurrent requests"},
		llmrate.KeyInputTokens:        {"key_input_tokens", "key", "input tokens"},
		llmrate.KeyOutputTokens:       {"key_output_tokens", "key", "output tokens"},
		llmrate.WorkspaceInputTokens:  {"workspace_input_tokens", "workspace", "input tokens"},
		llmrate.WorkspaceOutputTokens: {"workspace_output_tokens", "workspace", "output tokens"},
	} {
		assert.Equal(t, want, [3]string{b.String(), b.Scope(), b.Meter()}, "bucket %d", b)
	}
	assert.Equal(t, llmrate.Bucket(6), llmrate.KeyInputTokens)
	assert.Equal(t, llmrate.Bucket(9), llmrate.WorkspaceOutputTokens)
	assert.Equal(t, "unknown", llmrate.Bucket(10).String())
	for _, b := range []llmrate.Bucket{llmrate.KeyInputTokens, llmrate.KeyOutputTokens, llmrate.WorkspaceInputTokens, llmrate.WorkspaceOutputTokens} {
		assert.False(t, b.Tokens(), b.String())
		assert.False(t, b.Concurrent(), b.String())
		assert.Zero(t, b.PerMinute(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}))
	}
	w := llmrate.Window{Per: time.Hour, Requests: 1, Tokens: 2, InputTokens: 3, OutputTokens: 4}
	for scope := range 2 {
		var got [4]int64
		for i, b := range llmrate.WindowMeters()[scope] {
			got[i] = w.Figure(b)
		}
		assert.Equal(t, [4]int64{1, 2, 3, 4}, got)
	}
	assert.Zero(t, w.Figure(llmrate.KeyConcurrent))
}

func TestLimitsEqual(t *testing.T) {
	t.Parallel()
	a := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 2, Windows: []llmrate.Window{{Per: time.Hour, Requests: 3}}}
	b := a
	b.Windows = []llmrate.Window{{Per: time.Hour, Requests: 3}}
	assert.True(t, a.Equal(b))
	b.Windows[0].Requests = 4
	assert.False(t, a.Equal(b))
	assert.False(t, a.Equal(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 2}))
	assert.True(t, llmrate.Limits{}.Equal(llmrate.Limits{Windows: []llmrate.Window{}}), "nil and empty: no windows either way")
}

// What a reconcile adds to each window bucket's debt: the charge bounded at
// twice the bucket's own capacity (its figure), less what admission
// debited; a refund credits the admission back.
func TestReconcileWindowDelta(t *testing.T) {
	t.Parallel()
	w := llmrate.Window{Per: time.Minute, Requests: 5, Tokens: 1000, InputTokens: 400, OutputTokens: 80}
	r := llmrate.ReconcileRequest{Estimate: 300, Actual: 5000, InputEstimate: 200, InputActual: 150, OutputActual: 170}
	for b, want := range map[llmrate.Bucket]int64{
		llmrate.KeyRequests:           0,
		llmrate.KeyTokens:             2000 - 300, // bounded at 2×1,000
		llmrate.WorkspaceInputTokens:  150 - 200,
		llmrate.KeyOutputTokens:       160, // bounded at 2×80
		llmrate.WorkspaceOutputTokens: 160,
	} {
		assert.Equal(t, want, r.WindowDelta(b, w), b.String())
	}
	r.Refund = true
	for b, want := range map[llmrate.Bucket]int64{
		llmrate.WorkspaceRequests: -1, llmrate.KeyTokens: -300, llmrate.KeyInputTokens: -200, llmrate.KeyOutputTokens: 0,
	} {
		assert.Equal(t, want, r.WindowDelta(b, w), "refund "+b.String())
	}
	assert.Zero(t, r.WindowDelta(llmrate.KeyTokens, llmrate.Window{Per: time.Minute, Requests: 1}), "a meter the window does not limit")
}
