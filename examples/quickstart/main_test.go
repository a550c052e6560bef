package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQuickstart: the README's example forwards an admitted request with
// the provider's key in place of the caller's, reports the caller's tier
// in the rate-limit headers and the limits endpoint, and refuses a request
// whose max_tokens exceeds a whole bucket before the provider sees it.
func TestQuickstart(t *testing.T) {
	var calls int
	var sawAuth, sawAPIKey string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		sawAuth, sawAPIKey = r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	h, err := newHandler(u, "sk-provider")
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	send := func(key, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}

	resp := send("sk-acme", `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "Bearer sk-provider", sawAuth, "the provider gets the operator's key")
	assert.Empty(t, sawAPIKey, "the caller's key never reaches the provider")
	// The bucket's capacity: 2× Growth's 5,000 requests per minute.
	assert.Equal(t, "10000", resp.Header.Get(llmrate.HeaderLimitRequests), "sk-acme is on Growth")

	// Free: 200,000 tokens per minute, a bucket of 400,000. EstimateFromBody
	// debits max_tokens up front, so this request can never fit.
	resp = send("sk-other", `{"model":"gpt-4o-mini","max_tokens":500000,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "60", resp.Header.Get("Retry-After"))
	assert.Equal(t, 1, calls, "a refused request never reaches the provider")

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/platform/v1/limits", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-acme")
	lr, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer lr.Body.Close()
	var row struct {
		Tier           string `json:"tier"`
		RequestsPerMin int64  `json:"requestsPerMin"`
	}
	require.NoError(t, json.NewDecoder(lr.Body).Decode(&row))
	assert.Equal(t, int64(5000), row.RequestsPerMin)
}

// TestPlans: the README's plans block builds a limiter whose limits
// endpoint shows acme its plan by name, its monthly quota in Berlin and the
// claude entry's tokens per minute as not limited; others get free.
func TestPlans(t *testing.T) {
	lim, err := plans()
	require.NoError(t, err)
	get := func(key string) map[string]any {
		r := httptest.NewRequest(http.MethodGet, "/platform/v1/limits", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		lim.LimitsHandler().ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code)
		var m map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
		return m
	}
	acme := get("acme") // each key is its own workspace
	assert.Equal(t, "pro", acme["plan"])
	month := acme["windows"].([]any)[0].(map[string]any)
	assert.Equal(t, "month", month["calendar"])
	assert.Equal(t, "Europe/Berlin", month["zone"])
	assert.Equal(t, "unlimited", acme["models"].(map[string]any)["claude-*"].(map[string]any)["tokensPerMin"])
	assert.Equal(t, "free", get("sk-other")["plan"])
}
