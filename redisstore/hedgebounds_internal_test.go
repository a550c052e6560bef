package redisstore

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The latency histogram: a bucket holds the latencies up to its upper
// bound, which is at most a quarter above the lowest of the bucket (four
// buckets per power of two).
func TestLatencyBuckets(t *testing.T) {
	for _, d := range []time.Duration{1, 2, 3, 4, 5, 7, 8, 100, 999, 1000, 1024, 100 * time.Microsecond,
		time.Millisecond, 7500 * time.Microsecond, 30 * time.Millisecond, time.Hour} {
		i := latIndex(d)
		require.Less(t, i, latBuckets, "%v", d)
		assert.GreaterOrEqual(t, latUpper(i), d, "%v in bucket %d", d, i)
		if i > 0 {
			assert.Less(t, latUpper(i-1), d, "%v belongs to no lower bucket", d)
		}
		assert.LessOrEqual(t, float64(latUpper(i)), 1.25*float64(d)+1, "%v rounded up by at most a quarter", d)
	}
}

// The learned delay is the 99th percentile of the answered latencies: with
// 98.5% of answers at 200 µs and 1.5% at 20 ms it is the slow ones'
// bucket; with 99.5% at 200 µs it is the fast ones' (bounded below by
// 500 µs), and bounded above by a quarter of the call's time.
func TestHedgeDelayLearned(t *testing.T) {
	learn := func(slowPerMille int) *hedger {
		h := &hedger{}
		for i := range hedgeWindow {
			d := 200 * time.Microsecond
			if i%1000 < slowPerMille {
				d = 20 * time.Millisecond
			}
			h.observe(d, time.Now())
			h.called()
		}
		return h
	}
	ctx := context.Background()
	h := &hedger{}
	assert.Equal(t, 30*time.Millisecond/4, h.delayFor(ctx, time.Now(), 30*time.Millisecond), "nothing learned: a quarter of the timeout")

	slow := learn(15)
	assert.Equal(t, latUpper(latIndex(20*time.Millisecond)), time.Duration(slow.delay.Load()), "p99 among the slow answers")
	assert.Equal(t, 30*time.Millisecond/4, slow.delayFor(ctx, time.Now(), 30*time.Millisecond), "bounded by a quarter of the timeout")
	assert.Equal(t, latUpper(latIndex(20*time.Millisecond)), slow.delayFor(ctx, time.Now(), time.Second))

	fast := learn(5)
	assert.Equal(t, latUpper(latIndex(200*time.Microsecond)), time.Duration(fast.delay.Load()), "p99 among the fast answers")
	assert.Equal(t, hedgeMinDelay, fast.delayFor(ctx, time.Now(), time.Second), "at least hedgeMinDelay")
	assert.Equal(t, time.Millisecond/4, fast.delayFor(ctx, time.Now(), time.Millisecond), "unless the call has less than four of it")

	short, cancel := context.WithTimeout(ctx, 40*time.Millisecond)
	defer cancel()
	assert.LessOrEqual(t, slow.delayFor(short, time.Now(), time.Second), 10*time.Millisecond, "a quarter of the caller's deadline when nearer")
}

// Hedges are bounded: at most hedgeMaxInFlight at once, and per window of
// hedgeWindow calls at most hedgeBurst plus hedgeBudget of the window's
// calls so far.
func TestHedgeBounds(t *testing.T) {
	h := &hedger{}
	for range hedgeMaxInFlight {
		require.True(t, h.take())
	}
	assert.False(t, h.take(), "in flight at the bound")
	h.inFlight.Add(-hedgeMaxInFlight) // they ended
	assert.False(t, h.take(), "the burst is spent: no call made yet in the window")

	h = &hedger{}
	for range 500 {
		h.called()
	}
	n := 0
	for h.take() {
		h.inFlight.Add(-1)
		n++
	}
	assert.Equal(t, hedgeBurst+50, n, "16 + 10% of 500 calls")
	for range hedgeWindow - 500 {
		h.called()
	}
	assert.True(t, h.take(), "a new window: the budget starts afresh")
}

// TestHedgeCountersSettleAfterStalls: after stalls under 64 calls (resends
// refused by take and connFree, resends sent, callers cancelling early),
// every counter of the hedger comes back to rest once the attempts ended:
// a leaked in-flight count would stop hedging for good.
func TestHedgeCountersSettleAfterStalls(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	for _, pool := range []int{256, 20} {
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: pool})
		t.Cleanup(func() { _ = c.Close() })
		s, err := New(c, WithPrefix("hcs"+strconv.Itoa(pool)), WithHashKey([]byte("hedge-counters-secret-0")), WithBatching(1), WithFallbackLocal(), WithTimeout(100*time.Millisecond))
		require.NoError(t, err)
		ctx := context.Background()
		req := func(k string) llmrate.AdmitRequest {
			l := llmrate.Limits{RequestsPerMinute: 1e6, TokensPerMinute: 1e9}
			return llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: l, WorkspaceLimits: l, Tokens: 1, Solo: true, Now: time.Now(), ID: llmrate.NewAdmissionID()}
		}
		_, err = s.Admit(ctx, req("warm"))
		require.NoError(t, err)
		for round := range 4 {
			require.NoError(t, p.Set(faultproxy.Faults{SpikeReply: 1, Spike: 80 * time.Millisecond}))
			off := time.AfterFunc(30*time.Millisecond, func() { _ = p.Set(faultproxy.Faults{}) })
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Go(func() {
					cctx, cancel := context.WithCancel(ctx)
					defer cancel()
					if i%8 == 0 { // a caller that gives up early
						time.AfterFunc(time.Duration(5+round*5)*time.Millisecond, cancel)
					}
					_, _ = s.Admit(cctx, req("k"+strconv.Itoa(i)))
				})
			}
			wg.Wait()
			off.Stop()
			_ = p.Set(faultproxy.Faults{})
		}
		require.Eventually(t, func() bool { // every attempt past its deadline (the call's + WithTimeout); the fallback's charges, sent meanwhile, come and go
			return s.hedge.inFlight.Load() == 0 && s.hedge.active.Load() == 0
		}, 5*time.Second, time.Millisecond, "hedges and calls in flight back to 0")
		t.Logf("pool %d: hedges %d, inFlight %d, active %d, spent %d, calls %d", pool, s.Hedges(), s.hedge.inFlight.Load(), s.hedge.active.Load(), s.hedge.spent.Load(), s.hedge.calls.Load())
		require.GreaterOrEqual(t, s.hedge.spent.Load(), int64(0))
		_ = s.Close(ctx)
	}
}

// BenchmarkHedgerBookkeeping is the hedger's work on every call of a
// store (counted, in flight, Redis live, its latency observed), from
// every P at once: the counters every call writes share cache lines
// between cores, and the fields every call reads should not.
//
//	go test -run '^$' -bench HedgerBookkeeping -cpu 1,2 ./redisstore
func BenchmarkHedgerBookkeeping(b *testing.B) {
	s := &Store{timeout: 30 * time.Millisecond}
	s.hedge.delay.Store(int64(time.Millisecond))
	now := time.Now()
	s.hedge.observe(time.Millisecond, now)
	b.RunParallel(func(pb *testing.PB) {
		var n int
		for pb.Next() {
			h := &s.hedge
			h.called()
			h.active.Add(1)
			if !s.open.Load() && s.live(now) && h.delay.Load() != 0 {
				n++
			}
			h.observe(time.Duration(800+n%400)*time.Microsecond, now)
			h.active.Add(-1)
		}
	})
}

// TestHedgerFieldsApart: each group of the hedger's fields (by who writes
// them) is at least a cache line from the next, and from the Store's
// fields before it, so no two groups share a line wherever the Store is
// allocated: a field read by every call never sits on a line other
// cores' calls write.
func TestHedgerFieldsApart(t *testing.T) {
	var h hedger
	type span struct {
		name       string
		start, end uintptr // [start, end) within the hedger
	}
	groups := []span{
		{"delay", unsafe.Offsetof(h.delay), unsafe.Offsetof(h.delay) + unsafe.Sizeof(h.delay)},
		{"calls, active", unsafe.Offsetof(h.calls), unsafe.Offsetof(h.active) + unsafe.Sizeof(h.active)},
		{"answered", unsafe.Offsetof(h.answered), unsafe.Offsetof(h.answered) + unsafe.Sizeof(h.answered)},
		{"spent, inFlight, learning", unsafe.Offsetof(h.spent), unsafe.Offsetof(h.learning) + unsafe.Sizeof(h.learning)},
		{"hist", unsafe.Offsetof(h.hist), unsafe.Offsetof(h.hist) + unsafe.Sizeof(h.hist)},
	}
	if groups[0].start < cacheLine {
		t.Errorf("delay at %d: within a line of the Store's fields before the hedger", groups[0].start)
	}
	for i := 1; i < len(groups); i++ {
		if gap := groups[i].start - groups[i-1].end; gap < cacheLine {
			t.Errorf("%s starts %d bytes after %s ends; want at least %d", groups[i].name, gap, groups[i-1].name, cacheLine)
		}
	}
}
