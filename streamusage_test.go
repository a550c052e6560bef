package llmrate_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openAIStream is a provider that behaves like OpenAI's streaming chat
// completions: a usage-only chunk only when include_usage is set. It
// records the body it received.
func openAIStream(got *string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		*got = string(b)
		if r.ContentLength != int64(len(b)) {
			http.Error(w, "Content-Length "+strconv.FormatInt(r.ContentLength, 10)+" != body "+strconv.Itoa(len(b)), 400)
			return
		}
		var req struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		_ = json.Unmarshal(b, &req)
		w.Header().Set("Content-Type", "text/event-stream")
		u := ""
		if req.StreamOptions.IncludeUsage {
			u = `,"usage":null`
		}
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]`+u+"}\n\n")
		if req.StreamOptions.IncludeUsage {
			_, _ = io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":22,"total_tokens":33}}`+"\n\n")
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
}

func sendBody(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer sk-su")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestStreamUsageInjection(t *testing.T) {
	t.Parallel()
	var upstream string
	obs := &recorder{}
	on := newHarness(t, openAIStream(&upstream), llmrate.WithStreamUsage(), llmrate.WithObserver(obs))

	body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	w := sendBody(t, on.h, "/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, upstream, `"stream_options":{"include_usage":true}`, "injected upstream")
	assert.NotContains(t, w.Body.String(), "prompt_tokens", "the usage-only chunk is dropped for the client")
	assert.Contains(t, w.Body.String(), `"content":"hi"`)
	assert.Contains(t, w.Body.String(), "data: [DONE]")
	ev, _ := obs.lastReconcile()
	assert.Equal(t, llmrate.ReconcileUsage, ev.Kind)
	assert.Equal(t, int64(33), ev.Actual)

	// Existing stream_options are kept and merged.
	sendBody(t, on.h, "/v1/chat/completions", `{"stream":true,"stream_options":{"continuous_usage_stats":false}}`)
	assert.JSONEq(t, `{"stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}`, upstream)

	// A client that asked for usage gets everything untouched.
	asked := `{"stream":true,"stream_options":{"include_usage":true},"model":"x"}`
	w = sendBody(t, on.h, "/v1/chat/completions", asked)
	assert.Equal(t, asked, upstream, "body forwarded byte for byte")
	assert.Contains(t, w.Body.String(), `"prompt_tokens":11`)

	// Not streaming, not JSON, or another path: untouched.
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"stream":false}`},
		{"/v1/chat/completions", `not json {"stream":true}`},
		{"/v1/embeddings", `{"stream":true}`},
	} {
		sendBody(t, on.h, c.path, c.body)
		assert.Equal(t, c.body, upstream, "%s %s", c.path, c.body)
	}

	// Option off: the body is never touched.
	off := newHarness(t, openAIStream(&upstream))
	w = sendBody(t, off.h, "/v1/chat/completions", body)
	assert.Equal(t, body, upstream)
	assert.NotContains(t, w.Body.String(), "prompt_tokens")
}

func TestStreamUsageBodyBound(t *testing.T) {
	t.Parallel()
	var upstream string
	on := newHarness(t, openAIStream(&upstream), llmrate.WithStreamUsage(), llmrate.WithEstimator(func(*http.Request) int64 { return 1 }))
	big := `{"stream":true,"messages":[{"content":"` + strings.Repeat("a", llmrate.DefaultMaxInjectBody) + `"}]}`
	w := sendBody(t, on.h, "/v1/chat/completions", big)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String()[:min(200, w.Body.Len())])
	assert.Equal(t, len(big), len(upstream), "an oversized body is forwarded untouched")
	assert.True(t, upstream == big)
}

func TestReconcileSkippedWhenFailedOpen(t *testing.T) {
	t.Parallel()
	obs := &recorder{}
	h := newHarness(t, usageHandler(10, 10), llmrate.WithStore(&faultStore{mode: "error"}), llmrate.WithObserver(obs))
	require.Equal(t, http.StatusOK, h.send("sk-fo", 100).Code)
	_, n := obs.lastReconcile()
	assert.Zero(t, n, "a request admitted fail-open is not reconciled")
	require.Len(t, obs.failOpens, 1)
	var se *llmrate.StoreError
	assert.ErrorAs(t, obs.failOpens[0].Err, &se)
	assert.Equal(t, "admit", obs.failOpens[0].Op)
}

// TestStreamUsageContentLength: an upstream that declares its stream's
// Content-Length (a buffering proxy, a recorded replay) must not have that
// length reach the client once the usage-only chunk is dropped: the client
// read "unexpected EOF" (declared 177, got 85). Over a real server.
func TestStreamUsageContentLength(t *testing.T) {
	t.Parallel()
	const chunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n"
	const usageChunk = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":22,\"total_tokens\":33}}\n\n"
	const done = "data: [DONE]\n\n"
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(chunk+usageChunk+done)))
		_, _ = io.WriteString(w, chunk+usageChunk+done)
	})
	obs := &recorder{}
	l, err := llmrate.New(llmrate.WithStreamUsage(), llmrate.WithObserver(obs))
	require.NoError(t, err)
	srv := httptest.NewServer(l.Middleware(upstream))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","stream":true}`))
	req.Header.Set("Authorization", "Bearer sk-cl")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err, "the client reads the whole stream")
	assert.Equal(t, chunk+done, string(got), "the usage-only chunk is dropped, nothing else")
	assert.NotEqual(t, strconv.Itoa(len(chunk+usageChunk+done)), resp.Header.Get("Content-Length"))
	require.Eventually(t, func() bool { _, n := obs.lastReconcile(); return n == 1 }, 5e9, 1e6)
	ev, _ := obs.lastReconcile()
	assert.Equal(t, llmrate.ReconcileUsage, ev.Kind)
	assert.Equal(t, int64(33), ev.Actual)
}
