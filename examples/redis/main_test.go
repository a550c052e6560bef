package main

import (
	"github.com/llmrate/llmrate"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTwoGatewaysOneLimit: two limiters (as two processes would have) on
// one Redis share a key's burst, on one injected clock.
func TestTwoGatewaysOneLimit(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	var handlers []http.Handler
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c.Close() })
		// Timeouts generous enough that a loaded machine never fails open.
		lim, err := newLimiter(c, []byte("two-gateways-one-secret"),
			[]redisstore.Option{redisstore.WithClock(clock), redisstore.WithTimeout(time.Second)}, llmrate.WithStoreTimeout(2*time.Second))
		require.NoError(t, err)
		handlers = append(handlers, lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	}
	n := 0
	for i := range 300 {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer sk-shared")
		w := httptest.NewRecorder()
		handlers[i%2].ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			n++
		}
	}
	assert.Equal(t, 200, n, "one burst of 200 across both")
}
