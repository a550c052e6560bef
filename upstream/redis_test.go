package upstream_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/llmrate/llmrate/upstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redisRig is a rig whose Transport keeps its keys' buckets in a
// redisstore.Store on srv, on a client of its own (as a gateway process
// has one), with opts after the store's defaults (redisrig.Stores).
func redisRig(t *testing.T, srv *redistest.Server, p *provider, clk *fakeClock, keys []upstream.Key, opts ...redisstore.Option) *rig {
	t.Helper()
	c := redisrig.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	s := redisrig.Stores(t, c, 1, append([]redisstore.Option{redisstore.WithClock(clk.Now)}, opts...)...)[0]
	rec := &recorder{}
	tr, err := upstream.New(keys, upstream.WithStore(s), upstream.WithClock(clk.Now), upstream.WithObserver(rec), upstream.WithStoreTimeout(time.Second))
	require.NoError(t, err)
	return &rig{p: p, clk: clk, rec: rec, tr: tr, keys: keys}
}

// Two gateway processes (two Transports, two clients, two stores) sharing
// one Redis hold each key to one limit: admissions and charges made by one
// are seen by the other.
func TestRedisSharesKeyLimits(t *testing.T) {
	srv := redistest.Start(t)
	clk := newClock()
	p := newProvider(t)
	keys := []upstream.Key{bearerKey("a", "sk-a", 2, 1200), bearerKey("b", "sk-b", 100, 100_000)}
	prefix := redisrig.Prefix()
	var procs [2]*rig
	for i := range procs {
		procs[i] = redisRig(t, srv, p, clk, keys, redisstore.WithPrefix(prefix))
	}
	// a's requests: 2 RPM, a key holding 1× its figures: 2, shared.
	procs[0].post(t, chat("m", 400))
	procs[1].post(t, chat("m", 400))
	procs[0].post(t, chat("m", 400))
	assert.Equal(t, []string{"a:admitted", "a:skipped_own_limit", "b:admitted"}, procs[0].rec.outcomes())
	assert.Equal(t, []string{"a:admitted"}, procs[1].rec.outcomes())
	assert.Equal(t, []string{"sk-a", "sk-a", "sk-b"}, p.creds())

	// a's tokens: 1,200 TPM, capacity 1,200 (1×), 20 tokens/s. Two minutes
	// on, a is full again; one answer charging 1,150 (an Anthropic stream)
	// leaves 50, which the other process sees.
	clk.Add(2 * time.Minute)
	p.on("sk-a", sse(anthropicStream(1000, 150, "a long answer"), false))
	resp, body := procs[0].post(t, chat("claude", 400))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, "message_stop")
	procs[0].rec.outcomes()
	ev := procs[0].rec.reconciled()
	require.Len(t, ev, 3) // a, b, a
	assert.Equal(t, int64(1150), ev[2].Actual)
	clk.Add(time.Second) // a: 70 tokens; 1 request left
	p.on("sk-a", nil)
	procs[1].post(t, chat("m", 4*71)) // 71 > 70: b
	assert.Equal(t, []string{"a:skipped_own_limit", "b:admitted"}, procs[1].rec.outcomes())
	procs[1].post(t, chat("m", 4*70)) // fits exactly
	assert.Equal(t, []string{"a:admitted"}, procs[1].rec.outcomes())
}

// A provider 429 on a Redis-backed Transport fails over; the synthesized 429
// reads its Retry-After from the shared buckets.
func TestRedisFailoverAndSynthesized429(t *testing.T) {
	keys := []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 1200)}
	r := redisRig(t, redistest.Start(t), newProvider(t), newClock(), keys)
	p, rec := r.p, r.rec
	p.on("sk-a", tooMany("Retry-After", "40"))
	p.on("sk-b", openAIJSON(1100, 50, "b")) // b keeps 1,200 - 1,150 = 50
	resp, _ := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"a:provider_429", "b:admitted"}, rec.outcomes())
	// a skipped for 40 s; b (1,200 TPM held at 1×: 20 tokens/s) needs
	// (200 - 50) / 20 = 7.5 s, rounded up.
	resp, _ = r.post(t, chat("m", 800))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "8", resp.Header.Get("Retry-After"))
	assert.Equal(t, []string{"a:skipped_provider", "b:skipped_own_limit"}, rec.outcomes())
}

// The package doc (and docs/upstream.md) say a failure before the provider
// saw the request credits the reservation back in full, its request and its
// tokens, and docs/upstream.md recommends a redisstore.Store for the keys. On a
// Redis store the refund must give the request back too: key a (1 RPM, a
// burst of 2) whose attempts all failed at dial still has its whole burst.
func TestRedisDialErrorRefundsRequest(t *testing.T) {
	keys := []upstream.Key{bearerKey("a", "sk-a", 1, 1000)}
	r := redisRig(t, redistest.Start(t), newProvider(t), newClock(), keys)
	rec := r.rec
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
