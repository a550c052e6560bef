package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetrics(t *testing.T) {
	mux, err := newMux(prometheus.NewRegistry())
	require.NoError(t, err)
	const key = "sk-prom-SECRET"
	for range 205 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	text := string(body)
	assert.Contains(t, text, `llmrate_requests_total{bucket="key_requests",decision="refused",tier="free"}`)
	assert.Contains(t, text, `llmrate_requests_total{bucket="none",decision="admitted",tier="free"}`)
	assert.Contains(t, text, `llmrate_reconciles_total{kind="usage",tier="free"}`)
	assert.Contains(t, text, "llmrate_retry_after_seconds_bucket")
	assert.NotContains(t, text, "SECRET", "no raw key in any label")
	assert.NotContains(t, text, "sk-prom")
}
