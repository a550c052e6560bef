package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/llmratetest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testHashKey is the name-hash secret of the stores these tests build
// themselves.
var testHashKey = redisstore.WithHashKey([]byte("lease-test-secret-0123456789"))

// leaseStore is newStore with leases, closed when the test ends.
func leaseStore(t *testing.T, c redis.UniversalClient, share float64, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s := newStore(t, c, append([]redisstore.Option{redisstore.WithLeases(share)}, opts...)...)
	t.Cleanup(func() { assert.NoError(t, s.Close(context.Background())) })
	return s
}

func TestConformanceLeases(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.Addr)
	for _, share := range []float64{0.05, 0.25} {
		t.Run(strconv.FormatFloat(share, 'f', -1, 64), func(t *testing.T) {
			llmratetest.TestStore(t, func(t *testing.T, clock func() time.Time) llmrate.Store {
				return leaseStore(t, c, share, redisstore.WithClock(clock))
			})
		})
	}
}

func TestLeasesOptionValidated(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, share := range []float64{0, -0.1, 0.2500001, 1, math.NaN(), math.Inf(1)} {
		_, err := redisstore.New(c, testHashKey, redisstore.WithLeases(share))
		assert.Error(t, err, "%v", share)
	}
	s, err := redisstore.New(c, testHashKey, redisstore.WithLeases(0.25))
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))
	_, err = redisstore.New(c, testHashKey, redisstore.WithLeases(0.1), redisstore.WithBatching(8))
	assert.ErrorContains(t, err, "cannot be combined")
}

// sharedStores returns n stores ("processes") on one prefix, with leases.
func sharedStores(t *testing.T, c redis.UniversalClient, n int, share float64, clock func() time.Time) []*redisstore.Store {
	t.Helper()
	p := "t" + strconv.FormatInt(prefixes.Add(1), 10)
	var out []*redisstore.Store
	for range n {
		s, err := redisstore.New(c, testHashKey, redisstore.WithPrefix(p), redisstore.WithTimeout(time.Second), redisstore.WithLeases(share), redisstore.WithClock(clock))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, s.Close(context.Background())) })
		out = append(out, s)
	}
	return out
}

// TestLeasesThreeProcesses: three stores with leases on one redis-server,
// 250 concurrent requests of one Free key at one instant: at most the
// exact 200, and at least 200 less what three leases can strand.
func TestLeasesThreeProcesses(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.Addr)
	free := llmrate.DefaultTiers().Free
	for _, share := range []float64{0.1, 0.25} {
		t.Run(strconv.FormatFloat(share, 'f', -1, 64), func(t *testing.T) {
			now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			stores := sharedStores(t, c, 3, share, func() time.Time { return now })
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := range 250 {
				wg.Go(func() {
					d, err := stores[i%3].Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-burst", Workspace: "sk-burst", KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: now})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			floor := 200 - int64(3*share*200)
			t.Logf("share %v: %d of 250 admitted (bound: %d..200)", share, admitted.Load(), floor)
			assert.LessOrEqual(t, admitted.Load(), int64(200))
			assert.GreaterOrEqual(t, admitted.Load(), floor)
		})
	}
}

// TestLeasesNeverMoreThanExact: random traces of admissions spread over
// three processes with leases, with time passing (a lease's whole life
// too), idle leases returned and figures of every size: every admission
// they make is one an exact limit also makes. The reference is the memory
// store (exact integer buckets) fed the admitted requests only, in order, at
// the same instants: it must admit every one of them. A failure names its
// seed and step.
func TestLeasesNeverMoreThanExact(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.Addr)
	ctx := context.Background()
	admittedTotal, refusedTotal := 0, 0
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 13))
		clk := llmratetest.NewClock() // read by the stores' returners too
		share := []float64{0.01, 0.1, 0.25}[rng.IntN(3)]
		stores := sharedStores(t, c, 3, share, clk.Now)
		ref := llmrate.NewMemoryStore()
		limits := func() llmrate.Limits {
			return llmrate.Limits{RequestsPerMinute: 1 + rng.Int64N(300), TokensPerMinute: 1 + rng.Int64N(20000)}
		}
		solo := rng.IntN(2) == 0
		kl := limits()
		wl := kl
		keys := []string{"sk-a"}
		if !solo {
			wl = limits()
			keys = append(keys, "sk-b")
		}
		for step := range 400 {
			switch r := rng.IntN(20); {
			case r < 2: // time passes, up to 2 s (past a lease's life now and then)
				clk.Advance(time.Duration(rng.Int64N(2_000_000)) * time.Microsecond)
			case r < 6: // a little time passes
				clk.Advance(time.Duration(rng.Int64N(50_000)) * time.Microsecond)
			case r == 5:
				require.NoError(t, stores[rng.IntN(3)].ReturnIdleLeases(ctx, clk.Now().Add(-time.Duration(rng.Int64N(1_000_000))*time.Microsecond)))
			}
			key := keys[rng.IntN(len(keys))]
			ws := key
			if !solo {
				ws = "ws"
			}
			tok := 1 + rng.Int64N(1+kl.TokensPerMinute/200)
			if rng.IntN(10) == 0 {
				tok = 1 + rng.Int64N(2*kl.TokensPerMinute)
			}
			req := llmrate.AdmitRequest{Key: key, Workspace: ws, KeyLimits: kl, WorkspaceLimits: wl, Tokens: tok, Solo: solo, Now: clk.Now()}
			d, err := stores[rng.IntN(3)].Admit(ctx, req)
			require.NoError(t, err)
			if !d.Allowed {
				refusedTotal++
				continue
			}
			admittedTotal++
			want, err := ref.Admit(ctx, req)
			require.NoError(t, err)
			require.True(t, want.Allowed, "seed %d step %d: admitted with leases, refused by the exact limit (%v): %+v", seed, step, want.Refused, req)
		}
	}
	t.Logf("%d admitted, %d refused, all within the exact limit", admittedTotal, refusedTotal)
	assert.Positive(t, refusedTotal, "the traces reach the limits")
}

// countHook counts the commands a client sends (a pipeline's each).
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestLeasesRoundTrips counts Redis round trips (commands the client sends,
// script loads included) per 1,000 admissions of one hot key, with and
// without leases, one caller and 16 at once. Developer figures (1,000
// requests a minute: capacity 2,000), estimate 100 tokens.
func TestLeasesRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	dev := llmrate.DefaultTiers().Developer
	for _, share := range []float64{0, 0.1, 0.25} {
		for _, callers := range []int{1, 16} {
			t.Run(fmt.Sprintf("share=%v/callers=%d", share, callers), func(t *testing.T) {
				c := client(t, srv.Addr)
				hook := &countHook{}
				c.AddHook(hook)
				var s *redisstore.Store
				if share == 0 {
					s = newStore(t, c)
				} else {
					s = leaseStore(t, c, share)
				}
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for g := range callers {
					wg.Go(func() {
						for range 1000 / callers {
							d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-hot", Workspace: "sk-hot", KeyLimits: dev, WorkspaceLimits: dev, Tokens: 100, Solo: true, Now: time.Now()})
							if err != nil {
								t.Error(g, err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					})
				}
				wg.Wait()
				n := hook.n.Load()
				t.Logf("leases %v, %d callers: %d round trips for %d admissions (%d admitted)", share, callers, n, 1000/callers*callers, admitted.Load())
				assert.Equal(t, int64(1000/callers*callers), admitted.Load())
				if share == 0 {
					assert.GreaterOrEqual(t, n, int64(1000))
				} else {
					// 1,000 / (share × 2,000) renewals, each at most
					// two commands (EVALSHA, and EVAL after NOSCRIPT).
					assert.LessOrEqual(t, n, int64(2*(1000/(share*2000)+2)))
				}
			})
		}
	}
}

// TestLeaseReturnedWhenIdle: a lease unused for 0.8 s (on the stores'
// clock) goes back to Redis by itself, and another process then finds its
// capacity in the bucket.
func TestLeaseReturnedWhenIdle(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.Addr)
	clk := llmratetest.NewClock()
	stores := sharedStores(t, c, 2, 0.25, clk.Now)
	a, b := stores[0], stores[1]
	lim := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1_000_000} // capacity 20 requests: a lease of 5
	admit := func(s *redisstore.Store) llmrate.Decision {
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-i", Workspace: "sk-i", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true, Now: clk.Now()})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		return d
	}
	admit(a)
	admit(a) // busy now: takes a lease of 5 requests
	_, w := a.Keys("sk-i", "sk-i")
	require.Equal(t, int64(1), c.HLen(context.Background(), w+":l").Val(), "one lease out")
	clk.Advance(800 * time.Millisecond) // refills 0.13 of a request: no whole unit
	require.Eventually(t, func() bool { return c.HLen(context.Background(), w+":l").Val() == 0 }, 3*time.Second, 10*time.Millisecond,
		"the idle lease was returned")
	// 20 - 2 admitted - 1 now; the unused lease is back in the bucket.
	assert.Equal(t, int64(17), admit(b).Remaining[llmrate.WorkspaceRequests])
}
