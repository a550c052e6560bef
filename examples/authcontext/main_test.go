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

func TestWorkspaceFromContext(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h, err := newHandler(llmrate.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	send := func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("X-Workspace", "globex") // ignored: only the auth layer decides
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	n := 0
	for i := range 400 {
		if send([]string{"sk-carol", "sk-carol"}[i%2]) == http.StatusOK {
			n++
		}
	}
	assert.Equal(t, 200, n, "globex is Free")
	assert.Equal(t, http.StatusOK, send("sk-alice"), "acme (Growth) is its own workspace, untouched by globex")
	assert.Equal(t, http.StatusUnauthorized, send("sk-mallory"))
}
