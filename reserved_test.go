package llmrate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A workspace beginning "upstream:" (llmrate.ReservedWorkspacePrefix) is
// an upstream.Transport's: a caller naming one, by its key (each key its
// own workspace, the default) or through a workspace extractor, is refused
// 401 invalid_api_key before the store is asked, so a Limiter and a
// Transport sharing one store cannot spend each other's buckets. The
// limits endpoint refuses it too (it would read the provider key's
// levels).
func TestReservedWorkspaceRefused(t *testing.T) {
	t.Parallel()
	const reserved = "upstream:openai-1"
	for _, tc := range []struct {
		name string
		key  string
		opts []llmrate.Option
	}{
		{"key as workspace", reserved, nil},
		{"workspace extractor", "sk-caller", []llmrate.Option{llmrate.WithWorkspace(func(*http.Request) (string, error) { return reserved, nil })}},
		{"workspace extractor, key tiers", "sk-caller", []llmrate.Option{
			llmrate.WithWorkspace(func(*http.Request) (string, error) { return reserved, nil }),
			llmrate.WithKeyTiers(llmrate.DefaultTiers()),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			store := llmrate.NewMemoryStore()
			core, logs := observer.New(zapcore.DebugLevel)
			lim, err := llmrate.New(append([]llmrate.Option{llmrate.WithStore(store), llmrate.WithClock(clk.Now), llmrate.WithLogger(zap.New(core))}, tc.opts...)...)
			require.NoError(t, err)
			defer func() { require.NoError(t, lim.Close(context.Background())) }()
			provider := roundTripper(func(r *http.Request) (*http.Response, error) {
				_, _ = io.Copy(io.Discard, r.Body)
				body := `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
			})
			// Larger than the callers' tiers: a caller's admission would both debit
			// and clamp these buckets to its tier's capacity.
			limits := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1_000_000}
			tr, err := upstream.New([]upstream.Key{{Name: "openai-1", Limits: limits, Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer sk-provider") }}},
				upstream.WithStore(store), upstream.WithClock(clk.Now), upstream.WithBase(provider))
			require.NoError(t, err)
			defer func() { require.NoError(t, tr.Close(context.Background())) }()
			full := store.Levels(reserved, reserved, limits, limits, clk.Now())
			require.Equal(t, [4]int64{2000, 2_000_000, 2000, 2_000_000}, full)

			h := lim.Middleware(okHandler)
			for range 5 {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(strings.Repeat("x", 4000)))
				r.Header.Set("Authorization", "Bearer "+tc.key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				require.Equal(t, http.StatusUnauthorized, w.Code, w.Body.String())
				b := decodeErr(t, w)
				assert.Equal(t, "invalid_request_error", b.Error.Type)
				assert.Equal(t, "invalid_api_key", b.Error.Code)
				assert.Nil(t, b.Error.Param)
				assert.NotContains(t, w.Body.String(), tc.key, "the raw key is never echoed")
			}
			lr := httptest.NewRequest(http.MethodGet, "/platform/v1/limits", nil)
			lr.Header.Set("Authorization", "Bearer "+tc.key)
			lw := httptest.NewRecorder()
			lim.LimitsHandler().ServeHTTP(lw, lr)
			assert.Equal(t, http.StatusUnauthorized, lw.Code, lw.Body.String())
			assert.Equal(t, "invalid_api_key", decodeErr(t, lw).Error.Code)

			assert.Equal(t, full, store.Levels(reserved, reserved, limits, limits, clk.Now()), "the provider key's buckets did not move")
			for _, e := range logs.All() {
				assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), tc.key)
			}
			// The Transport spends its buckets alone: one request, charged its
			// reported 10 + 5 tokens.
			req, err := http.NewRequest(http.MethodPost, "http://provider.test/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, [4]int64{1999, 2_000_000 - 15, 1999, 2_000_000 - 15}, store.Levels(reserved, reserved, limits, limits, clk.Now()))
		})
	}
}

// A workspace that merely contains the prefix, or a key beginning with it
// under another workspace, is not reserved: only the workspace names the
// buckets the Transport uses.
func TestReservedPrefixOnlyAtWorkspaceStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	assert.Equal(t, http.StatusOK, h.send("sk-upstream:openai-1", 0).Code)
	assert.Equal(t, http.StatusOK, h.send("Upstream:openai-1", 0).Code, "the prefix is matched exactly, case and all")
	w := newHarness(t, okHandler, llmrate.WithWorkspace(func(*http.Request) (string, error) { return "acme", nil }))
	assert.Equal(t, http.StatusOK, w.send("upstream:openai-1", 0).Code, "a key is not a workspace here")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
