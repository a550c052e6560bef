package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// guarded hides a store's HonoursContext, so the limiter calls it on a
// guarded goroutine per call, as it calls any store that does not declare
// it honours its context.
type guarded struct{ llmrate.Store }

// BenchmarkMiddlewareRedis: whole requests through lim.Middleware over a
// no-op handler on Redis, side by side with redis_rate.Allow and a plain
// INCR on the same go-redis client (pool 128) and redis-server, at 1, 16
// and 64 goroutines.
//
//   - distinct keys: 1,000 keys in rotation, the limiter in its default
//     configuration (Free figures: each key's first 200 requests are
//     admitted, later ones refused, as redis_rate's with the same figures);
//     "direct" is the store called on the request's goroutine (the client
//     has ContextTimeoutEnabled), "guarded" on a goroutine per call;
//     "batched" is direct with WithBatching(64): concurrent admissions
//     share script calls (the store's default is one call per admission).
//     Every case sets the store's timeout and the limiter's store timeout
//     to 1 s, but "default-timeouts", direct at their defaults (30 ms and
//     50 ms: each store call bounded by both).
//   - hot key: one key with figures no run exhausts (10^12 a minute),
//     without leases and with leases of 0.1 and 0.25.
//
// Each llmrate store is first warmed, untimed, by warmCalls admissions of
// the hot key (warmStore): a store's first 1,024 calls run their attempts
// on goroutines until its hedge delay is learned (redisstore's hedge
// window), a cost each store pays once at start-up, not a gateway's
// steady state, which is what these figures are for.
//
// "distinct/paired" runs llmrate-middleware-direct and redis_rate in the
// same run, taking turns (runPaired): a machine that speeds up or slows
// down between two runs a second apart moves a p99 by more than the
// difference measured, so each turn of one is beside a turn of the other.
//
// Each sub-benchmark run uses fresh key names (its own prefix). The no-op
// handler writes nothing, so no reconcile is made: this is the admission
// path. Reports admissions/s, the p50 and p99 latency of one request
// (p50-us, p99-us), and for llmrate the store's hedges per 1,000
// admissions (hedges/1k-op: redisstore's Hedges, the calls sent again on
// another connection because no answer came within the hedge delay).
func BenchmarkMiddlewareRedis(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "sk-" + strconv.Itoa(i)
	}
	var prefix atomic.Int64
	var current *redisstore.Store // the store the latest middleware built
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	hugeTiers := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

	var on func(b *testing.B, c *redis.Client, wrap bool, share float64, batch int, timeout time.Duration, opts ...llmrate.Option) (func(key string) error, func())
	// middleware returns an op serving one request for a key through a
	// fresh limiter on a fresh prefix, and a func closing it.
	// batch 0: the default. timeout: the store's and the limiter's
	// timeouts (WithTimeout, WithStoreTimeout); 0 leaves both at their
	// defaults (30 ms and 50 ms).
	withTimeouts := func(b *testing.B, wrap bool, share float64, batch int, timeout time.Duration, opts ...llmrate.Option) (func(key string) error, func()) {
		return on(b, c, wrap, share, batch, timeout, opts...)
	}
	// A go-redis client at its defaults but for the pool's size: no
	// ContextTimeoutEnabled (each store call on a goroutine of its own),
	// go-redis's MaxRetries.
	cdef := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128})
	b.Cleanup(func() { _ = cdef.Close() })
	on = func(b *testing.B, c *redis.Client, wrap bool, share float64, batch int, timeout time.Duration, opts ...llmrate.Option) (func(key string) error, func()) {
		ropts := []redisstore.Option{redisstore.WithHashKey([]byte("bench-secret-0123456789")), redisstore.WithPrefix("b" + strconv.FormatInt(prefix.Add(1), 10))}
		if timeout > 0 {
			ropts = append(ropts, redisstore.WithTimeout(timeout))
			opts = append([]llmrate.Option{llmrate.WithStoreTimeout(timeout)}, opts...)
		}
		if share > 0 {
			ropts = append(ropts, redisstore.WithLeases(share))
		}
		if batch > 0 {
			ropts = append(ropts, redisstore.WithBatching(batch))
		}
		store, err := redisstore.New(c, ropts...)
		if err != nil {
			b.Fatal(err)
		}
		current = store
		var s llmrate.Store = store
		if wrap {
			s = guarded{store}
		}
		lim, err := llmrate.New(append([]llmrate.Option{llmrate.WithStore(s)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		h := lim.Middleware(noop)
		// One request per key, reused: the middleware does not modify it.
		reqs := map[string]*http.Request{}
		for _, k := range append(keys, "sk-hot") {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Header.Set("Authorization", "Bearer "+k)
			r.ContentLength = 400
			reqs[k] = r
		}
		before := lim.FailOpens()
		return func(key string) error {
				h.ServeHTTP(&nopWriter{h: http.Header{}}, reqs[key])
				return nil
			}, func() {
				if n := lim.FailOpens() - before; n > 0 {
					b.Errorf("%d requests failed open", n)
				}
				if err := lim.Close(ctx); err != nil {
					b.Error(err)
				}
				if err := store.Close(ctx); err != nil {
					b.Error(err)
				}
			}
	}
	middleware := func(b *testing.B, wrap bool, share float64, batch int, opts ...llmrate.Option) (func(key string) error, func()) {
		return withTimeouts(b, wrap, share, batch, time.Second, opts...)
	}
	rr := redis_rate.NewLimiter(c)
	free := llmrate.DefaultTiers().Free
	rrFree := redis_rate.Limit{Rate: int(free.RequestsPerMinute), Burst: int(2 * free.RequestsPerMinute), Period: time.Minute}
	rrHuge := redis_rate.Limit{Rate: 1 << 40, Burst: 1 << 40, Period: time.Minute}

	type bench struct {
		name string
		hot  bool
		make func(b *testing.B) (func(key string) error, func())
	}
	plain := func(f func(key string) error) func(b *testing.B) (func(key string) error, func()) {
		return func(*testing.B) (func(key string) error, func()) { return f, func() {} }
	}
	benches := []bench{
		{"distinct/llmrate-middleware-direct", false, func(b *testing.B) (func(string) error, func()) { return middleware(b, false, 0, 0) }},
		{"distinct/llmrate-middleware-direct-default-timeouts", false, func(b *testing.B) (func(string) error, func()) { return withTimeouts(b, false, 0, 0, 0) }},
		{"distinct/llmrate-middleware-direct-batched", false, func(b *testing.B) (func(string) error, func()) { return middleware(b, false, 0, 64) }},
		{"distinct/llmrate-middleware-guarded", false, func(b *testing.B) (func(string) error, func()) { return middleware(b, true, 0, 0) }},
		{"distinct/redis_rate", false, plain(func(key string) error {
			_, err := rr.Allow(ctx, "rr"+strconv.FormatInt(prefix.Load(), 10)+key, rrFree)
			return err
		})},
		{"distinct/plain-INCR", false, plain(func(key string) error { return c.Incr(ctx, key).Err() })},
		{"hot/llmrate-middleware", true, func(b *testing.B) (func(string) error, func()) {
			return middleware(b, false, 0, 0, llmrate.WithTiers(hugeTiers))
		}},
		{"hot/llmrate-middleware-leases-0.1", true, func(b *testing.B) (func(string) error, func()) {
			return middleware(b, false, 0.1, 0, llmrate.WithTiers(hugeTiers))
		}},
		{"hot/llmrate-middleware-leases-0.25", true, func(b *testing.B) (func(string) error, func()) {
			return middleware(b, false, 0.25, 0, llmrate.WithTiers(hugeTiers))
		}},
		{"hot/redis_rate", true, plain(func(key string) error {
			_, err := rr.Allow(ctx, "rr-hot", rrHuge)
			return err
		})},
		{"hot/plain-INCR", true, plain(func(key string) error { return c.Incr(ctx, key).Err() })},
	}
	// paired: llmrate-middleware-direct and redis_rate in the same run,
	// taking turns (below), each on a fresh prefix as above; "paired" on
	// the client above (ContextTimeoutEnabled), "paired-default-client" on
	// cdef, both sides, each store warmed first (warmStore).
	rrDef := redis_rate.NewLimiter(cdef)
	for _, pc := range []struct {
		name string
		c    *redis.Client
		rr   *redis_rate.Limiter
	}{{"paired", c, rr}, {"paired-default-client", cdef, rrDef}} {
		for _, g := range []int{1, 16, 64} {
			b.Run("distinct/"+pc.name+"/goroutines="+strconv.Itoa(g), func(b *testing.B) {
				prefix.Add(1)
				op, done := on(b, pc.c, false, 0, 0, time.Second)
				defer done()
				warmStore(b, op)
				rrPrefix := "rr" + strconv.FormatInt(prefix.Load(), 10)
				var n atomic.Int64
				key := func() string { return keys[n.Add(1)%int64(len(keys))] }
				runPaired(b, g, func() {
					if err := op(key()); err != nil {
						b.Error(err)
					}
				}, func() {
					if _, err := pc.rr.Allow(ctx, rrPrefix+key(), rrFree); err != nil {
						b.Error(err)
					}
				})
			})
		}
	}
	for _, bm := range benches {
		for _, g := range []int{1, 16, 64} {
			b.Run(bm.name+"/goroutines="+strconv.Itoa(g), func(b *testing.B) {
				prefix.Add(1)
				current = nil
				op, done := bm.make(b)
				defer done()
				var hedges []func() int64
				if current != nil {
					hedges = append(hedges, current.Hedges)
					warmStore(b, op)
				}
				var n atomic.Int64
				run := func() {
					key := "sk-hot"
					if !bm.hot {
						key = keys[n.Add(1)%int64(len(keys))]
					}
					if err := op(key); err != nil {
						b.Error(err)
					}
				}
				runAdmissions(b, c, g, run, hedges...)
			})
		}
	}
}

// warmCalls is how many admissions warmStore makes: more than the 1,024
// calls after which a redisstore store has learned its hedge delay.
const warmCalls = 1100

// warmStore makes warmCalls admissions of the hot key through op, 16 at a
// time, before a benchmark's timed run (a store's start-up, untimed).
func warmStore(b *testing.B, op func(key string) error) {
	var wg sync.WaitGroup
	var n atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n.Add(1) <= warmCalls {
				if err := op("sk-hot"); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
