package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchingIsOptIn: by default a store makes one script call per
// admission, on a *redis.Client as on a Ring; WithBatching(64) lets 64
// concurrent callers share calls.
func TestBatchingIsOptIn(t *testing.T) {
	srv, c := redisrig.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, PoolSize: 64})
	t.Cleanup(func() { _ = ring.Close() })
	lim := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	// calls returns the script calls that 64 callers × 10 admissions took.
	calls := func(s *redisstore.Store) int64 {
		// loads the script first (concurrent NOSCRIPT answers would each retry by EVAL)
		_, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "warm", Workspace: "warm", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
		require.NoError(t, err)
		before := commandCalls(t, c)
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				for i := range 10 {
					key := fmt.Sprintf("sk-%d-%d", g, i)
					d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
					assert.NoError(t, err)
					assert.True(t, d.Allowed)
				}
			})
		}
		wg.Wait()
		after := commandCalls(t, c)
		return after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	}
	assert.Equal(t, int64(640), calls(redisrig.Store(t, c)), "by default: one call per admission")
	assert.Equal(t, int64(640), calls(redisrig.Store(t, ring)), "a Ring: one call per admission")
	batched := calls(redisrig.Store(t, c, redisstore.WithBatching(64)))
	t.Logf("WithBatching(64): 640 admissions in %d script calls", batched)
	assert.Less(t, batched, int64(640), "WithBatching(64) shares calls")
}

// TestDefaultStoreOnClusterModeServer: a plain *redis.Client on a
// cluster-mode server (one node owning every slot, as a single-shard
// cluster endpoint or a slot-checking proxy presents it) works with the
// default store: each call names one request's keys, which share a hash
// tag. (A batch would name many workspaces' keys, which such a server
// refuses with CROSSSLOT: batching is opt-in and documented for single-node
// and Sentinel servers.)
func TestDefaultStoreOnClusterModeServer(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := redisrig.Client(t, srv.Addr)
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err())
	for i := 0; ; i++ {
		info, _ := c.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		require.Less(t, i, 100, "cluster state never ok")
		time.Sleep(50 * time.Millisecond)
	}
	lim := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	s := redisrig.Store(t, c)
	var errs atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 5 {
				key := fmt.Sprintf("sk-%d-%d", g, i)
				if _, err := s.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true}); err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, errs.Load(), "admissions failed, first: %v", first.Load())
}

// delayProxy forwards to target, holding each chunk of the server's answers
// for delay before passing it on: a Redis that answers every call in delay.
func delayProxy(t *testing.T, target string, delay time.Duration) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(u, c); _ = u.Close() })
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = c.Close()
						return
					}
				}
			})
		}
	})
	return l.Addr().String()
}

// TestBatchedCallersAnsweredWithinTheirDeadline: with batching, callers
// that arrive while a slow call (35 ms a round trip) is in flight cannot
// all be answered by Redis within their 50 ms, since each needs a second
// round trip. Each still returns by its own deadline (the store honours its
// context: the shared call ends by the earliest deadline among its
// admissions, where it once ran on the store's timeout alone, past the
// callers'), and with a local fallback each gets an answer, never an error
// (a caller withdrawn before its call was sent, or whose call timed out, is
// decided by the fallback, where it once failed open).
func TestBatchedCallersAnsweredWithinTheirDeadline(t *testing.T) {
	srv := redistest.Start(t)
	addr := delayProxy(t, srv.Addr, 35*time.Millisecond)
	c := redisrig.NewClient(t, &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 100_000}
	warm := redisrig.Store(t, c, redisstore.WithBatching(2)) // 1 s timeout
	for _, n := range []int{1, 2} {                          // loads both scripts, dials connections
		reqs := make([]llmrate.AdmitRequest, n)
		for i := range reqs {
			key := fmt.Sprintf("warm-%d", i)
			reqs[i] = llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true}
		}
		_, errs := warm.AdmitTogether(reqs)
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	s, err := redisstore.New(c, redisrig.HashKey, redisstore.WithPrefix("deadline"), redisstore.WithBatching(64),
		redisstore.WithTimeout(45*time.Millisecond), redisstore.WithRetryInterval(0), redisstore.WithFallbackLocal())
	require.NoError(t, err)
	const n = 16
	var failed, late atomic.Int64
	var worst atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if i > 0 {
				time.Sleep(3 * time.Millisecond) // arrive while the first call is in flight
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			dl, _ := ctx.Deadline()
			_, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-q", Workspace: "sk-q", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1000, Solo: true})
			over := time.Since(dl)
			for w := worst.Load(); over > time.Duration(w) && !worst.CompareAndSwap(w, int64(over)); w = worst.Load() {
			}
			if over > 25*time.Millisecond { // generous for -race on a loaded machine
				late.Add(1)
			}
			if err != nil {
				failed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("latest return %v past its deadline; Redis failures counted: %d", time.Duration(worst.Load()), s.Errors())
	assert.Zero(t, late.Load(), "callers returned well past their deadline")
	assert.Zero(t, failed.Load(), "with a fallback, every caller gets an answer")
}

// TestDeadlineCountsAsRedisFailure: a Redis that accepts connections and
// never answers. When the caller's deadline (the limiter's store timeout)
// is shorter than the store's own timeout, it is what ends each call, and
// each such call is counted as a Redis failure (Errors, and the breaker),
// batched or not; once counted as the caller giving up, an outage went
// uncounted at random.
func TestDeadlineCountsAsRedisFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	})
	c := redisrig.ContextClient(t, l.Addr().String())
	lim := llmrate.DefaultTiers().Free
	for _, batch := range []int{1, 64} {
		s, err := redisstore.New(c, redisrig.HashKey, redisstore.WithBatching(batch), redisstore.WithRetryInterval(0))
		require.NoError(t, err)
		for range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // under the store's 30 ms
			_, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-o", Workspace: "sk-o", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
			cancel()
			require.Error(t, err)
		}
		assert.Equal(t, int64(10), s.Errors(), "batch %d: every call to a Redis that never answers is a Redis failure", batch)
	}
}

// TestExpiredCallersDoNotTripTheBreaker: calls whose context is done before
// they start send nothing, so they are not Redis failures: three of them do
// not stop the store trying a healthy Redis, batched or not.
func TestExpiredCallersDoNotTripTheBreaker(t *testing.T) {
	_, c := redisrig.Start(t)
	lim := llmrate.DefaultTiers().Free
	req := llmrate.AdmitRequest{Key: "sk-e", Workspace: "sk-e", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true}
	for _, batch := range []int{1, 64} {
		s := redisrig.Store(t, c, redisstore.WithBatching(batch), redisstore.WithRetryInterval(time.Minute))
		_, err := s.Admit(context.Background(), req) // warm: script loaded, healthy
		require.NoError(t, err)
		for range 3 {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
			_, err := s.Admit(ctx, req)
			cancel()
			require.Error(t, err, "batch %d", batch)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = s.Admit(ctx, req)
		cancel()
		assert.NoError(t, err, "batch %d: a caller with time left still reaches Redis", batch)
		assert.Zero(t, s.Errors(), "batch %d: calls never sent counted as Redis failures", batch)
	}
}
