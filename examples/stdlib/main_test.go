package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServeMux(t *testing.T) {
	lim, err := llmrate.New()
	require.NoError(t, err)
	mux := newMux(lim)
	codes := map[int]int{}
	start := time.Now()
	for range 201 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer sk-stdlib")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		codes[w.Code]++
	}
	took := time.Since(start)
	// Wall clock: the burst of 200, and one more only if a refill (one per
	// 0.6 s on the free tier) came during the loop.
	assert.GreaterOrEqual(t, codes[http.StatusOK], 200)
	assert.LessOrEqual(t, codes[http.StatusOK], 200+min(1, int(took/(600*time.Millisecond))), "took %v", took)
	r := httptest.NewRequest(http.MethodGet, "/platform/v1/limits", nil)
	r.Header.Set("Authorization", "Bearer sk-stdlib")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	assert.Contains(t, w.Body.String(), `"requestsPerMin":100`)
}
