package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/llmratetest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConformance(t *testing.T) {
	_, c := redisrig.Start(t)
	llmratetest.TestStore(t, func(t *testing.T, clock func() time.Time) llmrate.Store {
		return redisrig.Store(t, c, redisstore.WithClock(clock))
	})
}

// TestConformanceUnbatched: one script call per admission (WithBatching(1));
// TestConformance runs the default, batched on a *redis.Client.
func TestConformanceUnbatched(t *testing.T) {
	_, c := redisrig.Start(t)
	llmratetest.TestStore(t, func(t *testing.T, clock func() time.Time) llmrate.Store {
		return redisrig.Store(t, c, redisstore.WithClock(clock), redisstore.WithBatching(1))
	})
}

func TestConformanceBatched(t *testing.T) {
	_, c := redisrig.Start(t)
	llmratetest.TestStore(t, func(t *testing.T, clock func() time.Time) llmrate.Store {
		return redisrig.Store(t, c, redisstore.WithClock(clock), redisstore.WithBatching(16))
	})
}

// TestBatchingFewerCalls: 64 concurrent callers share script calls, and a
// hot key still gets exactly its burst.
func TestBatchingFewerCalls(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c, redisstore.WithBatching(32))
	free := llmrate.DefaultTiers().Free
	now := time.Unix(1_700_000_000, 0)
	before := commandCalls(t, c)
	start := time.Now()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 10 {
				d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-batch", Workspace: "sk-batch", KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: now})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	after := commandCalls(t, c)
	calls := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	t.Logf("640 admissions in %d script calls", calls)
	assert.Less(t, calls, int64(640), "concurrent admissions shared calls")
	assert.Positive(t, calls)
	// Redis TIME moves during the run: the burst plus at most its refill,
	// one request per 0.6 s.
	assert.GreaterOrEqual(t, admitted.Load(), int64(200))
	assert.LessOrEqual(t, admitted.Load(), 200+1+int64(took/(600*time.Millisecond)), "took %v", took)
}

// TestBatchingWithdrawals: callers giving up at random moments (some while
// handed the lead) never lose or double the lead: everyone returns, and the
// store still answers afterwards. (Their deadlines, 0 to 20 ms, pass before
// many calls are answered; each such call counts as a Redis failure, so
// the store retries Redis at once rather than stopping for a second.)
func TestBatchingWithdrawals(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c, redisstore.WithBatching(4), redisstore.WithRetryInterval(0))
	lim := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	var wg sync.WaitGroup
	var answered, gaveUp atomic.Int64
	for g := range 48 {
		wg.Go(func() {
			for i := range 40 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i*13)%20000)*time.Microsecond)
				_, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-w", Workspace: "sk-w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
				cancel()
				if err != nil {
					gaveUp.Add(1)
				} else {
					answered.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("callers hung: the lead was lost")
	}
	t.Logf("%d answered, %d gave up", answered.Load(), gaveUp.Load())
	assert.Positive(t, gaveUp.Load(), "some callers gave up (the test exercises withdrawals)")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-w", Workspace: "sk-w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
	require.NoError(t, err, "the store still answers")
	assert.True(t, d.Allowed)
}

func TestBatchingOptionValidated(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	_, err := redisstore.New(cc, redisrig.HashKey, redisstore.WithBatching(8))
	assert.ErrorContains(t, err, "Cluster")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	_, err = redisstore.New(ring, redisrig.HashKey, redisstore.WithBatching(8))
	assert.ErrorContains(t, err, "Ring", "a Ring routes a call by its first key: a batch would put other keys' entries on the wrong shard")
	for _, c := range []redis.UniversalClient{cc, ring} {
		_, err = redisstore.New(c, redisrig.HashKey, redisstore.WithBatching(1))
		assert.NoError(t, err, "%T: one admission per call", c)
		_, err = redisstore.New(c, redisrig.HashKey)
		assert.NoError(t, err, "%T: unbatched by default", c)
	}
	c := redisrig.NewClient(t, &redis.Options{Addr: "127.0.0.1:1"})
	for _, n := range []int{0, -1} {
		_, err = redisstore.New(c, redisrig.HashKey, redisstore.WithBatching(n))
		var ce *llmrate.ConfigError
		require.ErrorAs(t, err, &ce, "WithBatching(%d)", n)
		assert.Equal(t, "redisstore.WithBatching", ce.Option)
	}
}

func TestConformanceCluster(t *testing.T) {
	addrs := redistest.Cluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.ForEachShard(context.Background(), func(ctx context.Context, s *redis.Client) error { return s.Ping(ctx).Err() }))
	llmratetest.TestStore(t, func(t *testing.T, clock func() time.Time) llmrate.Store {
		return redisrig.Store(t, c, redisstore.WithClock(clock))
	})
	// Keys were spread over the nodes, each request's two in one slot.
	var keys int64
	_ = c.ForEachMaster(context.Background(), func(ctx context.Context, s *redis.Client) error {
		n, err := s.DBSize(ctx).Result()
		atomic.AddInt64(&keys, n)
		return err
	})
	assert.Positive(t, keys)
}

func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// TestOneRoundTripPerAdmission counts the commands the server ran.
func TestOneRoundTripPerAdmission(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c)
	l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithStoreTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"usage":{"prompt_tokens":10,"completion_tokens":5}}`))
	}))
	send := func() int {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.ContentLength = 400
		r.Header.Set("Authorization", "Bearer sk-rt")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.NoError(t, l.Flush(context.Background())) // the reconcile, applied after the response
		return w.Code
	}
	require.Equal(t, http.StatusOK, send()) // loads the scripts (NOSCRIPT → EVAL)
	before := commandCalls(t, c)
	const n = 50
	for range n {
		require.Equal(t, http.StatusOK, send())
	}
	after := commandCalls(t, c)
	assert.Equal(t, int64(2*n), after["evalsha"]-before["evalsha"], "one EVALSHA per admission and one per reconcile")
	for cmd, calls := range after {
		// get/set/time run inside the script; hello and client set up a new
		// pooled connection (the reconcile workers' own).
		if cmd != "evalsha" && cmd != "info" && cmd != "get" && cmd != "set" && cmd != "time" && cmd != "hello" && cmd != "client" {
			assert.Equal(t, before[cmd], calls, "no other round trips (%s)", cmd)
		}
	}
	assert.Equal(t, before["eval"], after["eval"], "scripts run by SHA once loaded")

	// The server loses its scripts (SCRIPT FLUSH, as after a restart or a
	// failover): the next call gets NOSCRIPT, falls back to EVAL, and the
	// one after runs by SHA again.
	require.NoError(t, c.ScriptFlush(context.Background()).Err())
	require.Equal(t, http.StatusOK, send())
	flushed := commandCalls(t, c)
	assert.Equal(t, int64(2), flushed["eval"]-after["eval"], "admit and reconcile reloaded by EVAL")
	require.Equal(t, http.StatusOK, send())
	again := commandCalls(t, c)
	assert.Equal(t, flushed["eval"], again["eval"], "then by SHA again")
	assert.Equal(t, int64(2), again["evalsha"]-flushed["evalsha"])
}

// TestKeyNamesAndTTL: no raw key or workspace in Redis; hash tags; TTLs.
func TestKeyNamesAndTTL(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c, redisstore.WithHashKey([]byte("another-shared-secret")))
	const rawKey, ws = "sk-live-SECRET-abcdef123456", "acme-corp"
	free := llmrate.DefaultTiers().Free
	d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: rawKey, Workspace: ws, KeyLimits: free, WorkspaceLimits: free, Tokens: 1000, Now: time.Now()})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	keys, err := c.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 2)
	k, w := s.Keys(rawKey, ws)
	assert.ElementsMatch(t, []string{k, w}, keys)
	for _, name := range keys {
		assert.NotContains(t, name, "SECRET")
		assert.NotContains(t, name, rawKey)
		assert.NotContains(t, name, ws)
		tag := name[strings.Index(name, "{") : strings.Index(name, "}")+1]
		assert.Equal(t, tag, k[strings.Index(k, "{"):strings.Index(k, "}")+1], "both entries share one hash tag")
		ttl, err := c.PTTL(context.Background(), name).Result()
		require.NoError(t, err)
		// 1000 tokens at 200,000/min: 300 ms to full; 1 request: 600 ms; + 1 s
		// margin, + 10 s so that later admissions can keep this expiry
		assert.InDelta(t, 11600, ttl.Milliseconds(), 100, "TTL = time to refill to full + 1 s + 10 s")
	}

	// A Solo request (the key is its own workspace) keeps one entry.
	require.NoError(t, c.FlushDB(context.Background()).Err())
	d, err = s.Admit(context.Background(), llmrate.AdmitRequest{Key: rawKey, Workspace: rawKey, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: time.Now()})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	keys, _ = c.Keys(context.Background(), "*").Result()
	_, soloEntry := s.Keys(rawKey, rawKey)
	assert.Equal(t, []string{soloEntry}, keys)
	assert.Equal(t, [4]int64{199, 399_999, 199, 399_999}, d.Remaining)
}

// TestEntryOutlivesItsDebt: an entry written on the server's clock keeps
// its expiry while that falls late enough, and gets a later one as soon as
// it would not: after every admission, of random sizes, granted or
// refused, the entry lives at least until time alone would have refilled
// it to full, plus a second (computed from the levels the decision
// reports), and it is never set more than 10 s past that.
func TestEntryOutlivesItsDebt(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c)
	ctx := context.Background()
	lim := llmrate.Limits{RequestsPerMinute: 600, TokensPerMinute: 60_000}
	rng := rand.New(rand.NewPCG(7, 11))
	_, entry := s.Keys("sk-ttl", "sk-ttl")
	kept, moved := 0, 0
	last := time.Duration(0)
	for i := range 300 {
		r := llmrate.AdmitRequest{Key: "sk-ttl", Workspace: "sk-ttl", KeyLimits: lim, WorkspaceLimits: lim,
			Tokens: rng.Int64N(3000), Solo: true, ID: llmrate.NewAdmissionID()}
		start := time.Now()
		d, err := s.Admit(ctx, r)
		require.NoError(t, err)
		ttl, err := c.PTTL(ctx, entry).Result()
		require.NoError(t, err)
		// Time to full, in ms, from the reported levels (2x capacity).
		reqMs := float64(2*lim.RequestsPerMinute-d.Remaining[llmrate.KeyRequests]) * 60_000 / float64(lim.RequestsPerMinute)
		tokMs := float64(2*lim.TokensPerMinute-d.Remaining[llmrate.KeyTokens]) * 60_000 / float64(lim.TokensPerMinute)
		need := time.Duration(math.Ceil(max(reqMs, tokMs, 0)))*time.Millisecond + time.Second
		elapsed := time.Since(start) // PTTL runs a little after the admission
		assert.GreaterOrEqual(t, ttl+elapsed+time.Millisecond, need, "admission %d: the entry would expire before it is full", i)
		assert.LessOrEqual(t, ttl, need+10*time.Second+time.Millisecond, "admission %d: expiry set too late", i)
		if i > 0 && ttl <= last {
			kept++
		} else if i > 0 {
			moved++
		}
		last = ttl
	}
	t.Logf("expiry kept %d times, moved %d times", kept, moved)
	assert.Positive(t, kept, "a busy entry keeps its expiry")
	assert.Positive(t, moved, "and gets a later one when its debt needs it")
}

// TestModelKeyNames: a model entry's buckets live in entries of their own,
// in the workspace's hash slot, named by keyed hashes only.
func TestModelKeyNames(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c, redisstore.WithHashKey([]byte("another-shared-secret")))
	const rawKey, ws, model = "sk-live-SECRET-abcdef123456", "acme-corp", "gpt-4o*"
	free := llmrate.DefaultTiers().Free
	ctx := context.Background()
	for _, m := range []string{"", model, "o3"} {
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: rawKey, Workspace: ws, Model: m, KeyLimits: free, WorkspaceLimits: free, Tokens: 1000, Now: time.Now()})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, [4]int64{199, 399_000, 199, 399_000}, d.Remaining, "model %q: fresh buckets of its own", m)
	}
	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 6)
	k0, w0 := s.Keys(rawKey, ws)
	k1, w1 := s.ModelKeys(rawKey, ws, model)
	k2, w2 := s.ModelKeys(rawKey, ws, "o3")
	assert.ElementsMatch(t, []string{k0, w0, k1, w1, k2, w2}, keys)
	tag := k0[strings.Index(k0, "{") : strings.Index(k0, "}")+1]
	for _, name := range keys {
		assert.NotContains(t, name, "SECRET")
		assert.NotContains(t, name, ws)
		assert.NotContains(t, name, "gpt")
		assert.Equal(t, tag, name[strings.Index(name, "{"):strings.Index(name, "}")+1], "one hash slot per workspace")
	}
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: rawKey, Workspace: ws, Model: model, KeyLimits: free, WorkspaceLimits: free, Estimate: 1000, Actual: 5000, Now: time.Now()}))
	d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: rawKey, Workspace: ws, Model: model, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Now: time.Now()})
	require.NoError(t, err)
	assert.LessOrEqual(t, d.Remaining[llmrate.KeyTokens], int64(400_000-5000-1+1000), "the reconcile landed in the model's entries")
	d, err = s.Admit(ctx, llmrate.AdmitRequest{Key: rawKey, Workspace: ws, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Now: time.Now()})
	require.NoError(t, err)
	assert.Greater(t, d.Remaining[llmrate.KeyTokens], int64(400_000-5000), "and not in the default ones")
}

// TestServerTime: without WithClock the scripts use Redis TIME; the
// gateway's clock is ignored, so a skewed host cannot mint capacity.
func TestServerTime(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c)
	// One request a minute: a burst of 2, and whatever time the test takes
	// on a loaded machine refills nothing that a second could.
	lim := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1000}
	start := time.Now()
	skewed := start
	for i := range 2 {
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-st", Workspace: "sk-st", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Now: skewed})
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i)
		skewed = skewed.Add(time.Hour) // a host clock racing ahead mints nothing
	}
	d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-st", Workspace: "sk-st", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Now: skewed})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	// A minute for one request, less what elapsed on the server, in whole
	// seconds rounded up (the host clock, hours ahead, would have said 0).
	assert.LessOrEqual(t, d.RetryAfter, time.Minute)
	assert.GreaterOrEqual(t, d.RetryAfter, time.Minute-time.Since(start)-time.Second)
}

// TestRedisDownAndBack stops and restarts the real redis-server mid-run.
func TestRedisDownAndBack(t *testing.T) {
	for _, mode := range []struct{ fallback, batch, leases bool }{{false, false, false}, {true, false, false}, {false, true, false}, {false, false, true}, {true, false, true}} {
		fallback := mode.fallback
		t.Run(fmt.Sprintf("fallback=%v,batching=%v,leases=%v", mode.fallback, mode.batch, mode.leases), func(t *testing.T) {
			srv, c := redisrig.Start(t)
			// Timeouts generous enough that a loaded machine (CI under -race)
			// never fails a call of a live server: what is tested is what
			// happens when the server is gone, which fails at once.
			opts := []redisstore.Option{redisstore.WithTimeout(500 * time.Millisecond), redisstore.WithRetryInterval(200 * time.Millisecond)}
			if fallback {
				opts = append(opts, redisstore.WithFallbackLocal())
			}
			if mode.batch {
				opts = append(opts, redisstore.WithBatching(8))
			}
			if mode.leases {
				opts = append(opts, redisstore.WithLeases(0.1))
			}
			s := redisrig.Store(t, c, opts...)
			l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithStoreTimeout(time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			send := func(key string) (int, time.Duration) {
				r := httptest.NewRequest(http.MethodPost, "/", nil)
				r.Header.Set("Authorization", "Bearer "+key)
				w := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(w, r)
				return w.Code, time.Since(start)
			}
			// burst also checks admitted against the bucket: its 200 plus
			// what refilled while the burst ran (Redis TIME, or the local
			// clock when falling back: one request per 0.6 s).
			burst := func(key string, n int) (admitted int, slowest time.Duration) {
				start := time.Now()
				defer func() {
					if admitted < n { // a bucket was in force
						assert.GreaterOrEqual(t, admitted, 200, "burst of %q", key)
						assert.LessOrEqual(t, admitted, 200+int(time.Since(start)/(600*time.Millisecond)), "burst of %q took %v", key, time.Since(start))
					}
				}()
				for range n {
					code, took := send(key)
					slowest = max(slowest, took)
					if code == http.StatusOK {
						admitted++
					}
				}
				return admitted, slowest
			}
			a, _ := burst("sk-a", 250)
			require.Less(t, a, 250, "shared enforcement while up")

			srv.Stop()
			a, slowest := burst("sk-b", 250)
			if fallback {
				assert.Less(t, a, 250, "per-process buckets while Redis is down")
			} else {
				assert.Equal(t, 250, a, "fail open while Redis is down")
				assert.Positive(t, l.FailOpens())
			}
			// A call to a server that is gone fails at once, but for the
			// breaker's probes (one per retry interval), which go-redis
			// spends redialling (five tries, 100 ms apart) until the
			// store's timeout (500 ms) ends them.
			assert.Less(t, slowest, 750*time.Millisecond, "a call held past the store's timeout")
			assert.Positive(t, s.Errors())

			srv.Restart(t)
			require.Eventually(t, func() bool {
				code, _ := send("sk-probe")
				return code == http.StatusOK && s.Errors() > 0 && c.Exists(context.Background(), mustKey(s, "sk-probe")).Val() == 1
			}, 10*time.Second, 50*time.Millisecond, "shared enforcement resumes")
			a, _ = burst("sk-c", 250)
			assert.Less(t, a, 250, "shared enforcement again")
			assert.Equal(t, int64(1), c.Exists(context.Background(), mustKey(s, "sk-c")).Val(), "counted in Redis again")
		})
	}
}

// mustKey is the Redis key holding a default-config (Solo) key's buckets:
// its workspace entry.
func mustKey(s *redisstore.Store, key string) string {
	_, w := s.Keys(key, key)
	return w
}

// TestOptionsValidated: every invalid option is reported, each as a
// *llmrate.ConfigError naming it, all of them at once.
func TestOptionsValidated(t *testing.T) {
	c := redisrig.NewClient(t, &redis.Options{Addr: "127.0.0.1:1"})
	key := redisrig.HashKey
	for _, tc := range []struct {
		opt  redisstore.Option
		name string
	}{
		{redisstore.WithPrefix(""), "redisstore.WithPrefix"},
		{redisstore.WithPrefix("a{b}"), "redisstore.WithPrefix"},
		{redisstore.WithTimeout(0), "redisstore.WithTimeout"},
		{redisstore.WithRetryInterval(-time.Second), "redisstore.WithRetryInterval"},
		{redisstore.WithClock(nil), "redisstore.WithClock"},
		{redisstore.WithHashKey(nil), "redisstore.WithHashKey"},
		{redisstore.WithHashKey([]byte("fifteen-bytes!!")), "redisstore.WithHashKey"},
		{redisstore.WithBatching(0), "redisstore.WithBatching"},
		{redisstore.WithLeases(0.5), "redisstore.WithLeases"},
		{redisstore.WithSlotTTL(0), "redisstore.WithSlotTTL"},
		{redisstore.WithSlotTTL(-time.Second), "redisstore.WithSlotTTL"},
		{redisstore.WithFallbackLocal(llmrate.WithMaxKeys(0)), "redisstore.WithFallbackLocal"},
		{nil, "redisstore.Option"},
	} {
		_, err := redisstore.New(c, key, tc.opt)
		var ce *llmrate.ConfigError
		if assert.ErrorAs(t, err, &ce, tc.name) {
			assert.Equal(t, tc.name, ce.Option)
		}
	}
	_, err := redisstore.New(c, key, redisstore.WithPrefix(""), redisstore.WithTimeout(0))
	assert.ErrorContains(t, err, "WithPrefix")
	assert.ErrorContains(t, err, "WithTimeout", "both invalid options are reported")
	_, err = redisstore.New(nil, key)
	assert.Error(t, err)
}

// TestHashKeyRequired: the names in Redis are keyed by a secret the
// operator sets; there is no default (a public default would let anyone who
// can read Redis test guessed API keys against the names).
func TestHashKeyRequired(t *testing.T) {
	c := redisrig.NewClient(t, &redis.Options{Addr: "127.0.0.1:1"})
	_, err := redisstore.New(c)
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "redisstore.WithHashKey", ce.Option)
	assert.ErrorContains(t, err, "required")
	_, err = redisstore.New(c, redisstore.WithHashKey([]byte("0123456789abcdef")))
	assert.NoError(t, err, "16 bytes are enough")
}

// TestFallbackEvictionsReachObserver: evictions in the local fallback
// store reach the limiter's observer.
func TestFallbackEvictionsReachObserver(t *testing.T) {
	c := redisrig.NewClient(t, &redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 20 * time.Millisecond})
	s, err := redisstore.New(c, redisrig.HashKey, redisstore.WithTimeout(20*time.Millisecond),
		redisstore.WithRetryInterval(time.Hour), redisstore.WithFallbackLocal(llmrate.WithMaxKeys(128)))
	require.NoError(t, err)
	obs := &evictionCounter{}
	l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(obs), llmrate.WithStoreTimeout(time.Second))
	require.NoError(t, err)
	h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 400 {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer sk-"+strconv.Itoa(i))
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	assert.Zero(t, l.FailOpens(), "the fallback answered every request")
	assert.Greater(t, obs.n.Load(), int64(100), "a 128-entry fallback evicts most of 400 keys' entries")
}

type evictionCounter struct{ n atomic.Int64 }

func (*evictionCounter) Decided(llmrate.DecisionEvent)     {}
func (*evictionCounter) Reconciled(llmrate.ReconcileEvent) {}
func (*evictionCounter) FailedOpen(llmrate.FailOpenEvent)  {}
func (o *evictionCounter) Evicted()                        { o.n.Add(1) }

// TestMatchesMemoryStore: random sequences of admissions and reconciles,
// with random figures (changing mid-sequence), estimates, usage (absurd
// too) and clock moves (backwards too), get exactly the same decisions
// (allowed, refused bucket, Retry-After to the second, never-fits, the four
// remaining levels) from Redis as from the memory store, solo and with a
// separate workspace, unbatched and batched. Clock readings are whole
// microseconds, the Redis scripts' unit. Requests name model entries at
// random, each with buckets of its own. A failure names its seed and step.
func TestMatchesMemoryStore(t *testing.T) {
	_, c := redisrig.Start(t)
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			var now time.Time
			clock := func() time.Time { return now }
			opts := []redisstore.Option{redisstore.WithClock(clock), redisstore.WithBatching(1)}
			if batched {
				opts = append(opts, redisstore.WithBatching(4))
			}
			rs := redisrig.Store(t, c, opts...)
			ctx := context.Background()
			steps, batchedSteps := 0, 0
			for seed := uint64(1); seed <= 150; seed++ {
				rng := rand.New(rand.NewPCG(seed, 7))
				mem := llmrate.NewMemoryStore()
				now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
				limits := func() llmrate.Limits {
					return llmrate.Limits{RequestsPerMinute: 1 + rng.Int64N(20), TokensPerMinute: 1 + rng.Int64N(5000)}
				}
				solo := rng.IntN(2) == 0
				key := fmt.Sprintf("sk-%d", seed)
				ws := key
				kl := limits()
				wl := kl
				if !solo {
					ws = fmt.Sprintf("ws-%d", seed)
					wl = limits()
				}
				for step := 0; step < 40; step++ {
					steps++
					switch r := rng.IntN(10); {
					case r < 4: // time passes, by up to 90 s, to the microsecond
						now = now.Add(time.Duration(rng.Int64N(90_000_000)) * time.Microsecond)
					case r == 4: // a clock step backwards
						now = now.Add(-time.Duration(rng.Int64N(5_000_000)) * time.Microsecond)
					case r == 5: // a tier change: new figures, same buckets
						kl = limits()
						wl = kl
						if !solo {
							wl = limits()
						}
					}
					est := 1 + rng.Int64N(3*kl.TokensPerMinute)
					model := []string{"", "", "gpt-4o*", "o3"}[rng.IntN(4)] // each with buckets of its own
					req := llmrate.AdmitRequest{Key: key, Workspace: ws, Model: model, KeyLimits: kl, WorkspaceLimits: wl, Tokens: est, Solo: solo, Now: now}
					want, err := mem.Admit(ctx, req)
					require.NoError(t, err)
					// Redis reports Retry-After in whole seconds, rounded up:
					// what the header carries.
					want.RetryAfter = (want.RetryAfter + time.Second - 1).Truncate(time.Second)
					if batched && rng.IntN(3) == 0 {
						// Two or three admissions arriving together share one
						// call (the batch script), decided in order at one instant.
						reqs := []llmrate.AdmitRequest{req}
						wants := []llmrate.Decision{want}
						for range 1 + rng.IntN(2) {
							r := req
							r.Tokens = 1 + rng.Int64N(kl.TokensPerMinute)
							r.Model = []string{"", "", "gpt-4o*", "o3"}[rng.IntN(4)]
							w, err := mem.Admit(ctx, r)
							require.NoError(t, err)
							w.RetryAfter = (w.RetryAfter + time.Second - 1).Truncate(time.Second)
							reqs, wants = append(reqs, r), append(wants, w)
						}
						gots, errs := rs.AdmitTogether(reqs)
						for i := range reqs {
							require.NoError(t, errs[i])
							require.Equal(t, wants[i], gots[i], "seed %d step %d, admission %d of %d together: %+v", seed, step, i, len(reqs), reqs[i])
						}
						batchedSteps++
					} else {
						got, err := rs.Admit(ctx, req)
						require.NoError(t, err)
						require.Equal(t, want, got, "seed %d step %d: %+v", seed, step, req)
					}
					if !want.Allowed || rng.IntN(3) == 0 {
						continue
					}
					actual := rng.Int64N(6 * kl.TokensPerMinute) // past the 2×capacity bound too
					if rng.IntN(20) == 0 {
						actual = 1 << 40
					}
					rec := llmrate.ReconcileRequest{Key: key, Workspace: ws, Model: model, KeyLimits: kl, WorkspaceLimits: wl, Estimate: est, Actual: actual, Solo: solo, Now: now}
					require.NoError(t, mem.Reconcile(ctx, rec))
					require.NoError(t, rs.Reconcile(ctx, rec))
				}
			}
			t.Logf("%d steps compared, %d of them admissions decided together in one call", steps, batchedSteps)
			if batched {
				assert.Positive(t, batchedSteps)
			}
		})
	}
}
