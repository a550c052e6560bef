// Package bench compares llmrate with the rate limiters Go gateway authors
// would otherwise pick, on the same workloads in the same run. It is its own
// module so the peers never enter llmrate's go.mod.
package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/llmrate/llmrate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	tmem "github.com/throttled/throttled/v2/store/memstore"
	ulimiter "github.com/ulule/limiter/v3"
	ulstdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulmem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// A figure no benchmark reaches, so every decision is an admission.
const perMinute = 1_000_000_000

// decider is one limiter's single decision for a key.
type decider func(key string) bool

// llmrateDecider: four buckets, the key in a workspace of its own name.
// solo is the limiter's default configuration (each key its own workspace,
// no key caps), where the key's and the workspace's buckets are provably
// equal and kept once; !solo keeps them apart, as with WithWorkspace.
func llmrateDecider(solo bool) func(b *testing.B) decider {
	return func(b *testing.B) decider {
		s := llmrate.NewMemoryStore()
		lim := llmrate.Limits{RequestsPerMinute: perMinute, TokensPerMinute: perMinute}
		ctx := context.Background()
		return func(key string) bool {
			d, _ := s.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: solo, Now: time.Now()})
			return d.Allowed
		}
	}
}

// xrateMap is the usual "map of x/time/rate limiters" pattern.
func xrateDecider(b *testing.B) decider {
	var mu sync.Mutex
	m := map[string]*rate.Limiter{}
	return func(key string) bool {
		mu.Lock()
		l, ok := m[key]
		if !ok {
			l = rate.NewLimiter(rate.Limit(perMinute/60), 2*perMinute)
			m[key] = l
		}
		mu.Unlock()
		return l.Allow()
	}
}

func goLimiterDecider(b *testing.B) decider {
	s, err := memorystore.New(&memorystore.Config{Tokens: perMinute, Interval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	return func(key string) bool {
		_, _, _, ok, _ := s.Take(ctx, key)
		return ok
	}
}

func throttledDecider(b *testing.B) decider {
	st, err := tmem.NewCtx(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerMin(perMinute), MaxBurst: perMinute})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func(key string) bool {
		limited, _, _ := rl.RateLimitCtx(ctx, key, 1)
		return !limited
	}
}

func ululeDecider(b *testing.B) decider {
	l := ulimiter.New(ulmem.NewStore(), ulimiter.Rate{Period: time.Minute, Limit: perMinute})
	ctx := context.Background()
	return func(key string) bool {
		c, _ := l.Get(ctx, key)
		return !c.Reached
	}
}

type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(int)             {}

func httprateDecider(b *testing.B) decider {
	rl := httprate.NewRateLimiter(perMinute, time.Minute)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	// OnLimit writes headers: one writer per goroutine, from a pool.
	writers := sync.Pool{New: func() any { return &nopWriter{h: http.Header{}} }}
	return func(key string) bool {
		w := writers.Get().(*nopWriter)
		ok := !rl.OnLimit(w, r, key)
		writers.Put(w)
		return ok
	}
}

var deciders = []struct {
	name string
	make func(*testing.B) decider
}{
	{"llmrate-4buckets-default", llmrateDecider(true)},
	{"llmrate-4buckets-separate", llmrateDecider(false)},
	{"x-time-rate-map", xrateDecider},
	{"go-limiter", goLimiterDecider},
	{"throttled", throttledDecider},
	{"ulule", ululeDecider},
	{"httprate", httprateDecider},
}

// BenchmarkDecision: one decision per op, on one hot key serially, one hot
// key from all goroutines, and 100,000 distinct keys round-robin.
func BenchmarkDecision(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "sk-" + strings.Repeat("k", 20) + string(rune('a'+i%26)) + itoa(i)
	}
	for _, d := range deciders {
		b.Run(d.name+"/hot-serial", func(b *testing.B) {
			f := d.make(b)
			b.ReportAllocs()
			for range b.N {
				f("sk-hot")
			}
		})
		b.Run(d.name+"/hot-parallel", func(b *testing.B) {
			f := d.make(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					f("sk-hot")
				}
			})
		})
		b.Run(d.name+"/100k-keys-parallel", func(b *testing.B) {
			f := d.make(b)
			for _, k := range keys {
				f(k)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var seq sync.Mutex
			start := 0
			b.RunParallel(func(pb *testing.PB) {
				seq.Lock()
				i := start
				start += 50_000
				seq.Unlock()
				for pb.Next() {
					i++
					f(keys[i%len(keys)])
				}
			})
		})
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		if i /= 10; i == 0 {
			return string(b[n:])
		}
	}
}

var oneKB = []byte(`{"id":"chatcmpl-abc123","object":"chat.completion","created":1732000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("word ", 150) + `","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":150,"total_tokens":169},"system_fingerprint":"fp_abc"}`)

var provider = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header()["Content-Type"] = []string{"application/json"}
	_, _ = w.Write(oneKB)
})

func byAuth(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil }

var middlewares = []struct {
	name string
	make func(*testing.B) http.Handler
}{
	{"bare-handler", func(*testing.B) http.Handler { return provider }},
	{"llmrate-4buckets+usage", func(b *testing.B) http.Handler {
		big := llmrate.Limits{RequestsPerMinute: perMinute, TokensPerMinute: perMinute}
		l, err := llmrate.New(llmrate.WithTiers(llmrate.TierTable{Free: big, Developer: big, Team: big, Growth: big, Scale: big, Enterprise: big}))
		if err != nil {
			b.Fatal(err)
		}
		return l.Middleware(provider)
	}},
	{"llmrate-4buckets-nousage", func(b *testing.B) http.Handler {
		// The same admission and wrapping, on a body with no usage to scan
		// (text/plain): the cost comparable to the peers, which read no body.
		big := llmrate.Limits{RequestsPerMinute: perMinute, TokensPerMinute: perMinute}
		l, err := llmrate.New(llmrate.WithTiers(llmrate.TierTable{Free: big, Developer: big, Team: big, Growth: big, Scale: big, Enterprise: big}))
		if err != nil {
			b.Fatal(err)
		}
		return l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{"text/plain"}
			_, _ = w.Write(oneKB)
		}))
	}},
	{"throttled", func(b *testing.B) http.Handler {
		st, _ := tmem.NewCtx(1 << 20)
		rl, _ := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerMin(perMinute), MaxBurst: perMinute})
		h := throttled.HTTPRateLimiterCtx{RateLimiter: rl, VaryBy: &throttled.VaryBy{Headers: []string{"Authorization"}}}
		return h.RateLimit(provider)
	}},
	{"go-limiter", func(b *testing.B) http.Handler {
		s, _ := memorystore.New(&memorystore.Config{Tokens: perMinute, Interval: time.Minute})
		b.Cleanup(func() { _ = s.Close(context.Background()) })
		m, err := httplimit.NewMiddleware(s, func(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil })
		if err != nil {
			b.Fatal(err)
		}
		return m.Handle(provider)
	}},
	{"ulule", func(b *testing.B) http.Handler {
		l := ulimiter.New(ulmem.NewStore(), ulimiter.Rate{Period: time.Minute, Limit: perMinute})
		return ulstdlib.NewMiddleware(l, ulstdlib.WithKeyGetter(func(r *http.Request) string { return r.Header.Get("Authorization") })).Handler(provider)
	}},
	{"httprate", func(b *testing.B) http.Handler {
		return httprate.LimitBy(perMinute, time.Minute, byAuth)(provider)
	}},
}

// BenchmarkMiddleware: the whole per-request cost of each peer's own HTTP
// middleware around the same 1 KB JSON handler (llmrate also scans the body
// for usage and reconciles), with a reusable ResponseWriter and a prebuilt
// request.
func BenchmarkMiddleware(b *testing.B) {
	for _, m := range middlewares {
		b.Run(m.name, func(b *testing.B) {
			h := m.make(b)
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Header.Set("Authorization", "Bearer sk-bench")
			r.ContentLength = 400
			r.RemoteAddr = "10.0.0.1:1234"
			w := &nopWriter{h: http.Header{}}
			b.ReportAllocs()
			for range b.N {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
		})
	}
}
