package upstream_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// RoundTrip never modifies the caller's request; each attempt carries only
// its key's credential, never the caller's.
func TestCallerRequestUntouched(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{
		bearerKey("a", "sk-a", 100, 100_000),
		{Name: "anthropic", Limits: llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 100_000},
			Authorize: func(r *http.Request) { r.Header.Set("X-Api-Key", "sk-ant") }},
	})
	r.p.on("sk-a", tooMany())
	body := chat("m", 400)
	req, err := http.NewRequest(http.MethodPost, r.p.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer client-placeholder")
	req.Header.Set("X-Api-Key", "client-x")
	req.Header.Set("Api-Key", "client-azure")
	req.Header.Set("X-Trace", "t1")
	before := req.Header.Clone()
	resp, err := r.tr.RoundTrip(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, before, req.Header, "the caller's headers are untouched")
	assert.Equal(t, int64(400), req.ContentLength)
	assert.Same(t, req, resp.Request, "the response names the caller's request, not the clone with the credential")

	calls := r.p.calls()
	require.Len(t, calls, 2)
	assert.Equal(t, "Bearer sk-a", calls[0].Header.Get("Authorization"))
	assert.Empty(t, calls[0].Header.Get("X-Api-Key"))
	assert.Empty(t, calls[1].Header.Get("Authorization"), "a's credential does not leak into the next attempt")
	assert.Equal(t, "sk-ant", calls[1].Header.Get("X-Api-Key"))
	for _, c := range calls {
		assert.Empty(t, c.Header.Get("Api-Key"))
		assert.Equal(t, "t1", c.Header.Get("X-Trace"), "other headers pass")
		assert.Equal(t, body, string(c.Body))
	}
}

// The caller's body is closed on every path, exactly once.
func TestRequestBodyClosedOnEveryPath(t *testing.T) {
	t.Parallel()
	dead := closedURL(t)
	for _, tc := range []struct {
		name  string
		size  int
		tpm   int64
		setup func(r *rig) string // returns the URL
	}{
		{"answered", 400, 1_000_000, func(r *rig) string { return r.p.srv.URL }},
		{"failover", 400, 1_000_000, func(r *rig) string { r.p.on("sk-a", tooMany()); return r.p.srv.URL }},
		{"every key 429", 400, 1_000_000, func(r *rig) string { r.p.on("sk-a", tooMany()); r.p.on("sk-b", tooMany()); return r.p.srv.URL }},
		{"synthesized 429", 4 * 10_000, 1000, func(r *rig) string { return r.p.srv.URL }}, // fits no key
		{"dial error", 400, 1_000_000, func(*rig) string { return dead }},
		{"large, answered", upstream.MaxReplayBody + 10, 1_000_000, func(r *rig) string { return r.p.srv.URL }},
		{"large, 429", upstream.MaxReplayBody + 10, 1_000_000, func(r *rig) string { r.p.on("sk-a", tooMany()); return r.p.srv.URL }},
		{"large, synthesized 429", upstream.MaxReplayBody + 10, 1000, func(r *rig) string { return r.p.srv.URL }},
		{"large, dial error", upstream.MaxReplayBody + 10, 1_000_000, func(*rig) string { return dead }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, tc.tpm), bearerKey("b", "sk-b", 100, tc.tpm)})
			u := tc.setup(r)
			body := &trackedBody{Reader: strings.NewReader(chat("m", tc.size))}
			req, err := http.NewRequest(http.MethodPost, u, body)
			require.NoError(t, err)
			resp, err := r.tr.RoundTrip(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
			}
			assert.Equal(t, int32(1), body.closed.Load(), "closed once")
		})
	}
}

// gateway is a ReverseProxy in front of p whose Transport is tr: the
// incoming request's body has no GetBody.
func gateway(t *testing.T, p *provider, tr http.RoundTripper) *httptest.Server {
	t.Helper()
	u, err := url.Parse(p.srv.URL)
	require.NoError(t, err)
	gw := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:     tr,
		FlushInterval: -1,
	})
	t.Cleanup(gw.Close)
	return gw
}

// Behind httputil.ReverseProxy: failover replays the client's body (which
// has no GetBody), streams pass through, each key is charged its usage,
// and the synthesized 429 reaches the client whole.
func TestReverseProxy(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 100_000)})
	gw := gateway(t, r.p, r.tr)
	stream, total := fixture(t, "anthropic-messages-stream.sse")
	r.p.on("sk-a", tooMany("Retry-After", "30"))
	r.p.on("sk-b", sse(stream, false))
	body := chat("claude-sonnet-4", 2000)
	req, err := http.NewRequest(http.MethodPost, gw.URL+"/v1/messages", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", "client-key")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, stream, string(got))
	calls := r.p.calls()
	require.Len(t, calls, 2)
	for _, c := range calls {
		assert.Equal(t, body, string(c.Body), "replayed byte for byte")
		assert.NotEqual(t, "client-key", c.Cred)
	}
	assert.Equal(t, []string{"a:provider_429", "b:admitted"}, r.rec.outcomes())
	assert.Equal(t, 200_000-total, r.levels("b")[llmrate.KeyTokens], "b charged its stream's usage")
	assert.Equal(t, int64(200_000-2000/4), r.levels("a")[llmrate.KeyTokens], "a keeps its 429's estimate")

	// Both keys out: the client gets the synthesized 429.
	r.p.on("sk-b", tooMany("Retry-After", "10"))
	resp, err = http.Post(gw.URL+"/v1/messages", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	got, _ = io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "10", resp.Header.Get("Retry-After"), "b's own 429, the last attempt's")
	assert.Contains(t, string(got), "provider says slow down")
	resp, err = http.Post(gw.URL+"/v1/messages", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	got, _ = io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "10", resp.Header.Get("Retry-After"), "synthesized: b's skip ends first")
	assert.Contains(t, string(got), `"type":"rate_limit_error"`)
	assert.Len(t, r.p.calls(), 3)
}

// Many concurrent requests through one Transport: every response charged
// exactly once, the keys' levels exact.
func TestConcurrentCharges(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 1000, 1_000_000), bearerKey("b", "sk-b", 1000, 1_000_000)})
	r.p.on("sk-a", openAIJSON(30, 12, "a"))
	r.p.on("sk-b", sse(openAIStream(20, 7, "b", "c"), false))
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := chat("m", 400)
			if i%2 == 1 {
				body = chat("m", 800)
			}
			resp, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(body))
			if !assert.NoError(t, err) {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
	assert.Len(t, r.rec.reconciled(), n)
	assert.Equal(t, [4]int64{2000 - n, 2_000_000 - n*42, 2000 - n, 2_000_000 - n*42}, r.levels("a"))
	assert.Len(t, r.p.calls(), n)
}

// A key's credential never appears in a log line, whatever happens.
func TestLogsNameKeysNeverSecrets(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	p := newProvider(t)
	clk := newClock()
	tr, err := upstream.New([]upstream.Key{bearerKey("alpha", "sk-alpha-SECRET", 1, 100_000), bearerKey("beta", "sk-beta-SECRET", 100, 100_000)},
		upstream.WithClock(clk.Now), upstream.WithLogger(zap.New(core)))
	require.NoError(t, err)
	p.on("sk-beta-SECRET", tooMany("Retry-After", "3"))
	c := &http.Client{Transport: tr}
	for range 4 {
		resp, err := c.Post(p.srv.URL, "application/json", strings.NewReader(chat("m", 400)))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	clk.Add(3 * time.Second) // beta's skip is over
	_, err = c.Post(closedURL(t), "application/json", strings.NewReader(chat("m", 400)))
	require.Error(t, err)
	require.NotEmpty(t, logs.All())
	names := map[string]bool{}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		assert.NotContains(t, line, "SECRET")
		if k, ok := e.ContextMap()["upstream_key"].(string); ok {
			names[k] = true
		}
	}
	assert.Equal(t, map[string]bool{"alpha": true, "beta": true}, names)
}

// The estimator sees the body without consuming what is sent.
func TestEstimatorReadsBody(t *testing.T) {
	t.Parallel()
	var seen []byte
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)}, upstream.WithEstimator(func(req *http.Request) int64 {
		seen, _ = io.ReadAll(req.Body)
		return 77
	}))
	r.p.on("sk-a", openAIJSON(0, 0, "")) // charges 0: the level shows the estimate was replaced
	body := chat("m", 400)
	r.post(t, body)
	assert.Equal(t, body, string(seen))
	assert.Equal(t, body, string(r.p.calls()[0].Body))
	ev := r.rec.reconciled()
	require.Len(t, ev, 1)
	assert.Equal(t, int64(77), ev[0].Estimate)
	assert.Equal(t, int64(200_000), r.levels("a")[llmrate.KeyTokens])
}

// A chunked body's estimate is its buffered length / 4.
func TestChunkedBodyEstimate(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
	req, err := http.NewRequest(http.MethodPost, r.p.srv.URL, io.NopCloser(bytes.NewReader([]byte(chat("m", 1000)))))
	require.NoError(t, err)
	resp, err := r.client().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	ev := r.rec.reconciled()
	require.Len(t, ev, 1)
	assert.Equal(t, int64(250), ev[0].Estimate)
}
