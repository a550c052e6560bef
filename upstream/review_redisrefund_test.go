package upstream_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/llmrate/llmrate/upstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review: the package doc (and README "Upstream keys") say a failure before the provider
// saw the request credits the reservation back in full, its request and its
// tokens, and the README recommends a redisstore.Store for the keys. On a
// Redis store the refund must give the request back too: key a (1 RPM, a
// burst of 2) whose attempts all failed at dial still has its whole burst.
func TestReviewRedisDialErrorRefundsRequest(t *testing.T) {
	srv := redistest.Start(t)
	clk := newClock()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.WithHashKey([]byte("0123456789abcdef-test-only")), redisstore.WithClock(clk.Now), redisstore.WithTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	p := newProvider(t)
	rec := &recorder{}
	keys := []upstream.Key{bearerKey("a", "sk-a", 1, 1000)}
	tr, err := upstream.New(keys, upstream.WithStore(s), upstream.WithClock(clk.Now), upstream.WithObserver(rec), upstream.WithStoreTimeout(time.Second))
	require.NoError(t, err)
	r := &rig{p: p, clk: clk, rec: rec, tr: tr, keys: keys}
	url := closedURL(t)
	for range 2 {
		_, err := r.client().Post(url, "application/json", strings.NewReader(chat("m", 400)))
		require.Error(t, err)
	}
	for _, e := range rec.reconciled() {
		require.True(t, e.Refund)
	}
	rec.outcomes()
	resp, _ := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a's burst of 2 must be intact after two refunded attempts")
	assert.Equal(t, []string{"a:admitted"}, rec.outcomes())
}
