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

func TestChi(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	lim, err := llmrate.New(llmrate.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	h := newRouter(lim)
	n := 0
	for range 300 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("x-api-key", "sk-chi")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			n++
		}
	}
	assert.Equal(t, 200, n)
	r := httptest.NewRequest(http.MethodGet, "/platform/v1/limits", nil)
	r.Header.Set("x-api-key", "sk-chi")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusOK, w.Code, "the limits endpoint is outside the limited group")
}
