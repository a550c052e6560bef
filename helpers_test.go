package llmrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/llmratetest"
	"github.com/stretchr/testify/require"
)

// fakeClock is the conformance suite's settable clock.
type fakeClock = llmratetest.Clock

func newFakeClock() *fakeClock { return llmratetest.NewClock() }

// usageHandler is a mock provider: an OpenAI chat completion reporting the
// given usage (or none when prompt < 0).
func usageHandler(prompt, completion int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if prompt < 0 {
			_, _ = io.WriteString(w, `{"id":"x","choices":[]}`)
			return
		}
		_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, prompt, completion, prompt+completion)
	})
}

var okHandler = usageHandler(-1, 0)

type harness struct {
	t     *testing.T
	clock *fakeClock
	lim   *llmrate.Limiter
	h     http.Handler
}

func newHarness(t *testing.T, next http.Handler, opts ...llmrate.Option) *harness {
	t.Helper()
	c := newFakeClock()
	l, err := llmrate.New(append([]llmrate.Option{llmrate.WithClock(c.Now)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	return &harness{t: t, clock: c, lim: l, h: l.Middleware(next)}
}

// send sends one request for key with a declared Content-Length.
func (h *harness) send(key string, contentLength int64) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
	r.ContentLength = contentLength
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	return w
}

// burst sends small requests until the first refusal (at most max) and
// returns how many were admitted.
func (h *harness) burst(key string, max int) int {
	for i := range max {
		if w := h.send(key, 0); w.Code != http.StatusOK {
			require.Equal(h.t, http.StatusTooManyRequests, w.Code)
			return i
		}
	}
	return max
}

type errBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func decodeErr(t *testing.T, w *httptest.ResponseRecorder) errBody {
	t.Helper()
	var b errBody
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &b), w.Body.String())
	return b
}

// faultStore is a Store that misbehaves on demand.
type faultStore struct {
	mode    string // "error", "hang", "ignore-ctx", "panic"
	release chan struct{}
}

func (s *faultStore) Admit(ctx context.Context, _ llmrate.AdmitRequest) (llmrate.Decision, error) {
	switch s.mode {
	case "error":
		return llmrate.Decision{}, fmt.Errorf("connection refused")
	case "hang":
		<-ctx.Done()
		return llmrate.Decision{}, ctx.Err()
	case "ignore-ctx":
		<-s.release
		return llmrate.Decision{Allowed: true}, nil
	case "panic":
		panic("store exploded")
	}
	return llmrate.Decision{Allowed: true}, nil
}

func (s *faultStore) Reconcile(context.Context, llmrate.ReconcileRequest) error { return nil }

func getenv(k string) string { return os.Getenv(k) }

func atomicAdd(p *int64) { atomic.AddInt64(p, 1) }

type fixture = usageref.Fixture

const fixtureDir = "testdata/usage"

func loadFixtures(t testing.TB) []fixture { return usageref.LoadFixtures(t, fixtureDir) }

var splits = usageref.Splits

func wantUsage(f fixture) (llmrate.Usage, bool) {
	if f.Input == nil {
		return llmrate.Usage{}, false
	}
	return llmrate.Usage{InputTokens: *f.Input, OutputTokens: *f.Output,
		CachedInputTokens: f.Cached, CacheWriteTokens: f.CacheW, ReasoningTokens: f.Reasoning}, true
}
