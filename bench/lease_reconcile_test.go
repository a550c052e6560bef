package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// reconcileCounter is a redisstore store that counts the reconciles the
// limiter sends it; every other method (HonoursContext, Close,
// NotifyEvictions) is the store's own.
type reconcileCounter struct {
	*redisstore.Store
	n atomic.Int64
}

func (s *reconcileCounter) Reconcile(ctx context.Context, r llmrate.ReconcileRequest) error {
	s.n.Add(1)
	return s.Store.Reconcile(ctx, r)
}

// BenchmarkMiddlewareRedisLeaseReconcile: BenchmarkMiddlewareRedis's hot
// key with leases (0.1 and 0.25), over a handler that answers as an LLM
// API does, a JSON body with its usage (30 tokens against the estimate's
// 100), so every request is reconciled, as every real response is; the
// hot-key figures of BenchmarkMiddlewareRedis come from a handler that
// writes nothing, so no reconcile is made. Reports requests/s (as
// admissions/s), latency, and reconciles/op (the reconciles the store was
// sent per request, counted after the limiter's Flush).
func BenchmarkMiddlewareRedisLeaseReconcile(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	hugeTiers := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":10,"total_tokens":30}}`)
	answer := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	var prefix atomic.Int64
	for _, share := range []float64{0.1, 0.25} {
		for _, g := range []int{1, 16, 64} {
			b.Run("hot/leases-"+strconv.FormatFloat(share, 'f', -1, 64)+"/goroutines="+strconv.Itoa(g), func(b *testing.B) {
				store, err := redisstore.New(c, redisstore.WithHashKey([]byte("bench-secret-0123456789")),
					redisstore.WithPrefix("lr"+strconv.FormatInt(prefix.Add(1), 10)), redisstore.WithTimeout(time.Second), redisstore.WithLeases(share))
				if err != nil {
					b.Fatal(err)
				}
				counted := &reconcileCounter{Store: store}
				lim, err := llmrate.New(llmrate.WithStore(counted), llmrate.WithStoreTimeout(time.Second), llmrate.WithTiers(hugeTiers))
				if err != nil {
					b.Fatal(err)
				}
				h := lim.Middleware(answer)
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
				r.Header.Set("Authorization", "Bearer sk-hot")
				r.ContentLength = 400
				op := func(string) error {
					h.ServeHTTP(&nopWriter{h: http.Header{}}, r)
					return nil
				}
				warmStore(b, op)
				before, fails := counted.n.Load(), lim.FailOpens()
				runAdmissions(b, c, g, func() { _ = op("sk-hot") }, store.Hedges)
				if err := lim.Flush(ctx); err != nil {
					b.Error(err)
				}
				b.ReportMetric(float64(counted.n.Load()-before)/float64(b.N), "reconciles/op")
				if n := lim.FailOpens() - fails; n > 0 {
					b.Errorf("%d requests failed open", n)
				}
				if err := lim.Close(ctx); err != nil {
					b.Error(err)
				}
				if err := store.Close(ctx); err != nil {
					b.Error(err)
				}
			})
		}
	}
}
