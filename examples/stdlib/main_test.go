package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServeMux(t *testing.T) {
	lim, err := llmrate.New()
	require.NoError(t, err)
	mux := newMux(lim)
	codes := map[int]int{}
	for range 201 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer sk-stdlib")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		codes[w.Code]++
	}
	assert.GreaterOrEqual(t, codes[http.StatusOK], 200)
	assert.LessOrEqual(t, codes[http.StatusOK], 201, "wall clock: at most one refill during the burst")
	r := httptest.NewRequest(http.MethodGet, "/platform/v1/limits", nil)
	r.Header.Set("Authorization", "Bearer sk-stdlib")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	assert.Contains(t, w.Body.String(), `"requestsPerMin":100`)
}
