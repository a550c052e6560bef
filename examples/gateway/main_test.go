package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// startGateway runs the gateway on a free port until the test ends and
// checks that it shuts down cleanly.
func startGateway(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-listen", "127.0.0.1:0", "-quiet", "-log-level", "error"}, args...), io.Discard, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("gateway did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "graceful shutdown")
	})
	return "http://" + addr
}

func post(t *testing.T, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

func TestGatewayBurstGets429(t *testing.T) {
	url := startGateway(t)
	var admitted, refused atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			for range jobs {
				resp := post(t, url, "sk-burst", `{"model":"m"}`)
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
					assert.NotEmpty(t, resp.Header.Get("Retry-After"))
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	for range 250 {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	// Wall clock here: the burst of 200 plus one request per 0.6 s elapsed.
	maxAdmitted := 200 + int64(elapsed/(600*time.Millisecond))
	assert.GreaterOrEqual(t, admitted.Load(), int64(200))
	assert.LessOrEqual(t, admitted.Load(), maxAdmitted, "elapsed %v", elapsed)
	assert.Equal(t, int64(250), admitted.Load()+refused.Load())
}

func TestGatewayStreamUsageInjectedAndHidden(t *testing.T) {
	url := startGateway(t)
	resp := post(t, url, "sk-s", `{"model":"m","stream":true,"messages":[]}`)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "data: [DONE]")
	assert.NotContains(t, string(body), `"prompt_tokens"`, "the client did not ask for usage and never sees it")

	resp = post(t, url, "sk-s", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, string(body), `"prompt_tokens"`, "a client that asked for usage gets it")
}

func TestGatewayConfigAndLimits(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "llmrate.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"keys":{"sk-a":"acme","sk-b":"acme"},"workspaces":{"acme":"enterprise"}}`), 0o600))
	url := startGateway(t, "-config", cfg)
	get := func(key string) string {
		req, _ := http.NewRequest(http.MethodGet, url+"/platform/v1/limits", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	assert.Contains(t, get("sk-b"), `"tier":"enterprise","requestsPerMin":null`)
	assert.Contains(t, get("sk-other"), `"tier":"free"`)
	resp, err := http.Post(url+"/platform/v1/limits", "application/json", nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"workspaces":{"acme":"platinum"}}`), 0o600))
	err = run(context.Background(), []string{"-config", bad, "-listen", "127.0.0.1:0"}, io.Discard, nil)
	assert.ErrorContains(t, err, `unknown tier "platinum"`)
}

// TestGatewayUpstream: -upstream proxies to a provider, sending the
// operator's key (from -upstream-key-env) instead of the client's, and the
// provider's usage reconciles.
func TestGatewayUpstream(t *testing.T) {
	var sawAuth, sawPath string
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth, sawPath = r.Header.Get("Authorization"), r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Ratelimit-Remaining-Requests", "9999")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	}))
	defer provider.Close()
	t.Setenv("TEST_PROVIDER_KEY", "sk-operator")
	url := startGateway(t, "-upstream", provider.URL, "-upstream-key-env", "TEST_PROVIDER_KEY")
	resp := post(t, url, "sk-client", `{"model":"m"}`)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "Bearer sk-operator", sawAuth, "the provider never sees the client's key")
	assert.Equal(t, "/v1/chat/completions", sawPath)
	assert.Equal(t, "199", resp.Header.Get("X-Ratelimit-Remaining-Requests"), "the gateway's own figure replaces the provider account's")
	assert.Contains(t, string(body), `"prompt_tokens":3`)

	err := run(context.Background(), []string{"-upstream", "not a url", "-listen", "127.0.0.1:0"}, io.Discard, nil)
	assert.ErrorContains(t, err, "want an absolute URL")
}

// TestGatewayPolicies: the config file's model limits, overrides and
// shadow switch take effect.
func TestGatewayPolicies(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "llmrate.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{
		"keys": {"sk-big": "bigco"},
		"workspaces": {"bigco": "enterprise"},
		"models": {"gpt-4o*": {"default": {"requestsPerMin": 1, "tokensPerMin": 30000}}},
		"overrides": {"bigco": {"requestsPerMin": 2, "tokensPerMin": 150000}}}`), 0o600))
	url := startGateway(t, "-config", cfg)
	codes := func(key, body string, n int) (got []int, last string) {
		for range n {
			resp := post(t, url, key, body)
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			got, last = append(got, resp.StatusCode), string(b)
		}
		return got, last
	}
	got, msg := codes("sk-m", `{"model":"gpt-4o-mini","messages":[]}`, 3)
	assert.Equal(t, []int{200, 200, 429}, got, "gpt-4o*: a burst of 2×1")
	assert.Contains(t, msg, "Rate limit reached for gpt-4o* for this API key on requests per minute")
	got, _ = codes("sk-m", `{"model":"o3-mini","messages":[]}`, 3)
	assert.Equal(t, []int{200, 200, 200}, got, "no entry: the Free tier's default buckets")
	got, _ = codes("sk-big", `{"model":"o3-mini"}`, 5)
	assert.Equal(t, []int{200, 200, 200, 200, 429}, got, "bigco's override: a burst of 2×2")

	req, _ := http.NewRequest(http.MethodGet, url+"/platform/v1/limits", nil)
	req.Header.Set("Authorization", "Bearer sk-big")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, string(b), `"tier":"enterprise","requestsPerMin":2,"tokensPerMin":150000`)
	assert.Contains(t, string(b), `"models":{"gpt-4o*":{"requestsPerMin":null,"tokensPerMin":null}}`)

	shadow := filepath.Join(dir, "shadow.json")
	require.NoError(t, os.WriteFile(shadow, []byte(`{"shadow": true, "models": {"gpt-4o*": {"default": {"requestsPerMin": 1, "tokensPerMin": 30000}}}}`), 0o600))
	url = startGateway(t, "-config", shadow)
	got, _ = codes("sk-m", `{"model":"gpt-4o"}`, 4)
	assert.Equal(t, []int{200, 200, 200, 200}, got, "shadow mode refuses nothing")

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"models": {"gpt-4o": {"free": {"requestsPerMin": 1, "tokensPerMin": 1}}}}`), 0o600))
	err = run(context.Background(), []string{"-config", bad, "-listen", "127.0.0.1:0"}, io.Discard, nil)
	assert.ErrorContains(t, err, `no figures for the developer tier`)
}

// TestHashKeyFromEnvironment: the Redis hash key comes from the
// environment; too short is an error; unset, a random key for this process
// alone, and the log says so.
func TestHashKeyFromEnvironment(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)
	t.Setenv("TEST_GW_HASH_KEY", "0123456789abcdef")
	k, err := hashKeyFrom("TEST_GW_HASH_KEY", log)
	require.NoError(t, err)
	assert.Equal(t, []byte("0123456789abcdef"), k)
	assert.Zero(t, logs.Len())

	t.Setenv("TEST_GW_HASH_KEY", "short")
	_, err = hashKeyFrom("TEST_GW_HASH_KEY", log)
	assert.ErrorContains(t, err, "at least 16")

	t.Setenv("TEST_GW_HASH_KEY", "")
	k1, err := hashKeyFrom("TEST_GW_HASH_KEY", log)
	require.NoError(t, err)
	k2, err := hashKeyFrom("TEST_GW_HASH_KEY", log)
	require.NoError(t, err)
	assert.Len(t, k1, 32)
	assert.NotEqual(t, k1, k2, "random")
	require.Equal(t, 2, logs.Len())
	assert.Contains(t, logs.All()[0].Message, "random one for this process only")
}

// TestGatewayPlans: plans.json loads, and the limits endpoint shows a
// caller its plan by name, its monthly quota in its zone and the
// Anthropic-shaped entry whose tokens per minute are not limited.
func TestGatewayPlans(t *testing.T) {
	url := startGateway(t, "-config", "plans.json")
	get := func(key string) map[string]any {
		req, _ := http.NewRequest(http.MethodGet, url+"/platform/v1/limits", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return m
	}
	alice := get("sk-alice")
	assert.Equal(t, "pro", alice["plan"])
	assert.Nil(t, alice["tier"], "plans, not tiers")
	month := alice["windows"].([]any)[0].(map[string]any)
	assert.Equal(t, "month", month["calendar"])
	assert.Equal(t, "Europe/Berlin", month["zone"])
	assert.Equal(t, "unlimited", alice["models"].(map[string]any)["claude-*"].(map[string]any)["tokensPerMin"])
	assert.Equal(t, "pro-tokyo", get("sk-carol")["plan"])
	assert.Equal(t, "starter", get("sk-stranger")["plan"], "a workspace not listed gets defaultPlan")

	resp := post(t, url, "sk-alice", `{"model":"claude-sonnet-4","messages":[{"role":"user","content":"hi"}]}`)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"plans":{"pro":{"requestsPerMin":1,"tokensPerMin":1}},"workspaces":{"acme":"gold"},"defaultPlan":"pro"}`), 0o600))
	err := run(context.Background(), []string{"-config", bad, "-listen", "127.0.0.1:0"}, io.Discard, nil)
	assert.ErrorContains(t, err, `no plan "gold"`)
}
