package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGatewayUpstreamKeys: with upstream-keys.json the first key (which the
// mock refuses with 429) is skipped, the next four serve what their
// per-minute figures hold (a key's buckets hold 1× them, as a provider's
// do): 3 + 3 + 50 + 10 requests, and then the client gets the synthesized
// 429.
func TestGatewayUpstreamKeys(t *testing.T) {
	url := startGateway(t, "-config", "upstream-keys.json")
	for i := range 66 {
		resp := post(t, url, "sk-client", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body)
		assert.Contains(t, string(body), `"usage"`)
	}
	resp := post(t, url, "sk-client", `{"model":"gpt-4o-mini","messages":[]}`)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	var env struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &env))
	assert.Equal(t, "rate_limit_error", env.Error.Type)
	assert.Equal(t, "rate_limit_exceeded", env.Error.Code)
	assert.Contains(t, env.Error.Message, "every upstream key")
	// mock-b and mock-c refill a request every 20 s, the Anthropic-shaped
	// key every 1.2 s, the Gemini-shaped one every 6 s; mock-out-of-room is
	// skipped for 30 s: the soonest is at most 20 s away.
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.True(t, secs >= 1 && secs <= 20, "Retry-After %d", secs)
}

// TestGatewayUpstreamKeysToProvider: with -upstream the keys' credentials
// come from the environment and the provider never sees the client's.
func TestGatewayUpstreamKeysToProvider(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") == "Bearer sk-env-1" {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	}))
	defer provider.Close()
	t.Setenv("TEST_UPSTREAM_1", "sk-env-1")
	t.Setenv("TEST_UPSTREAM_2", "sk-env-2")
	cfg := filepath.Join(t.TempDir(), "keys.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"upstream": {"keys": [
		{"name": "one", "requestsPerMin": 10, "tokensPerMin": 10000, "secretEnv": "TEST_UPSTREAM_1"},
		{"name": "two", "requestsPerMin": 10, "tokensPerMin": 10000, "secretEnv": "TEST_UPSTREAM_2"}]}}`), 0o600))
	url := startGateway(t, "-config", cfg, "-upstream", provider.URL)
	resp := post(t, url, "sk-client", `{"model":"m"}`)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	mu.Lock()
	assert.Equal(t, []string{"Bearer sk-env-1", "Bearer sk-env-2"}, seen)
	mu.Unlock()

	inline := filepath.Join(t.TempDir(), "inline.json")
	require.NoError(t, os.WriteFile(inline, []byte(`{"upstream": {"keys": [{"name": "x", "requestsPerMin": 1, "tokensPerMin": 1, "secret": "sk-real"}]}}`), 0o600))
	err := run(context.Background(), []string{"-config", inline, "-upstream", provider.URL, "-listen", "127.0.0.1:0"}, io.Discard, nil)
	assert.ErrorContains(t, err, "an inline secret is for the built-in mock only")
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"upstream": {"keys": [{"name": "x", "requestsPerMin": 0, "tokensPerMin": 1, "secret": "mock-1"}]}}`), 0o600))
	err = run(context.Background(), []string{"-config", bad, "-listen", "127.0.0.1:0"}, io.Discard, nil)
	assert.ErrorContains(t, err, "RequestsPerMinute 0 out of range")
}

// TestGatewayUpstreamKeysRedis: on Redis a caller presenting the key
// "upstream:mock-b" (its own workspace, by default: the name of mock-b's
// buckets) is refused 401 and spends nothing of mock-b's.
func TestGatewayUpstreamKeysRedis(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("LLMRATE_HASH_KEY", "0123456789abcdef-test-only")
	url := startGateway(t, "-config", "upstream-keys.json", "-redis", "redis://"+srv.Addr+"/0")
	codes := []int{}
	for i := range 68 {
		key := "sk-client"
		if i == 1 { // once mock-b's buckets exist
			key = "upstream:mock-b"
		}
		resp := post(t, url, key, `{"model":"gpt-4o-mini","messages":[]}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	want := []int{200, 401}
	for range 65 {
		want = append(want, 200)
	}
	want = append(want, 429)
	assert.Equal(t, want, codes, "the keys at 1× their per-minute figures: 3 + 3 + 50 + 10, then the synthesized 429")
}
