package main

import (
	"compress/gzip"
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

// recorder hands each reconcile to the test; the reconcile runs on the
// server after the handler returns, possibly after the client has read the
// response.
type recorder struct{ ch chan llmrate.ReconcileEvent }

func (r *recorder) Decided(llmrate.DecisionEvent)       {}
func (r *recorder) Reconciled(e llmrate.ReconcileEvent) { r.ch <- e }
func (r *recorder) FailedOpen(llmrate.FailOpenEvent)    {}
func (r *recorder) Evicted()                            {}

func TestReverseProxy(t *testing.T) {
	var sawKey, sawBody string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawKey = r.Header.Get("Authorization")
		b, _ := io.ReadAll(r.Body)
		sawBody = string(b)
		w.Header().Set("X-Ratelimit-Remaining-Requests", "4999") // the operator's provider account
		if strings.Contains(sawBody, `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n")
			_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
		_ = zw.Close()
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	obs := &recorder{ch: make(chan llmrate.ReconcileEvent, 4)}
	h, err := newHandler(u, "sk-provider", llmrate.WithObserver(obs))
	require.NoError(t, err)
	gw := httptest.NewServer(h)
	defer gw.Close()

	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("Authorization", "Bearer sk-client")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "Bearer sk-provider", sawKey, "the upstream never sees the client's key")
	assert.Contains(t, sawBody, `"include_usage":true`)
	assert.NotContains(t, string(body), "prompt_tokens", "the injected usage chunk is not passed on")
	assert.Equal(t, "199", resp.Header.Get("X-Ratelimit-Remaining-Requests"), "the gateway's own figure, not the provider account's")
	assert.Equal(t, int64(10), (<-obs.ch).Actual)

	req, _ = http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Authorization", "Bearer sk-client")
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	// Read the whole response: a client that hangs up first cuts the
	// response off, and the reconcile is then rightly partial.
	assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), "passed through compressed")
	zr, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	plain, err := io.ReadAll(zr)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`, string(plain), "the client gets the upstream's bytes")
	ev := <-obs.ch
	assert.Equal(t, llmrate.ReconcileUsage, ev.Kind)
	assert.Equal(t, int64(7), ev.Actual, "usage found in the gzip body")
}
