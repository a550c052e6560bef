package llmrate_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/llmratetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	llmratetest.TestStore(t, func(*testing.T, func() time.Time) llmrate.Store { return llmrate.NewMemoryStore() })
}

// TestLevelsOfAnUnseenKeyInAUsedWorkspace: a key never admitted has full
// buckets at its own figures, even when its name is its workspace's and that
// workspace was spent by another key; only a Solo key (its own workspace,
// kept once) reports its workspace's levels as its own.
func TestLevelsOfAnUnseenKeyInAUsedWorkspace(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	now := time.Unix(1_700_000_000, 0)
	kl := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
	wl := llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: 5000}
	ctx := context.Background()
	d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "alice", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 300, Now: now})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, [4]int64{20, 2000, 99, 9700}, s.Levels("acme", "acme", kl, wl, now),
		"key acme was never admitted: full at the key's figures (2×10, 2×1000); the workspace spent 1 and 300")

	d, err = s.Admit(ctx, llmrate.AdmitRequest{Key: "solo", Workspace: "solo", KeyLimits: wl, WorkspaceLimits: wl, Tokens: 300, Solo: true, Now: now})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, [4]int64{99, 9700, 99, 9700}, s.Levels("solo", "solo", wl, wl, now), "a Solo key's buckets are its workspace's")
}

// TestEvictionsReachEveryObserver: every limiter sharing a store has its
// observer told of each of the store's lossy evictions, whichever limiter's
// request caused it; an observer given to two limiters is told once.
func TestEvictionsReachEveryObserver(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(128)) // one entry per shard: nearly every new key evicts
	o1, o2, shared := &recorder{}, &recorder{}, &recorder{}
	l1, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(o1))
	require.NoError(t, err)
	l2, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(o2))
	require.NoError(t, err)
	l3, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(shared))
	require.NoError(t, err)
	l4, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(shared))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i, l := range []*llmrate.Limiter{l1, l2, l3, l4} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := l.Middleware(okHandler)
			for k := range 300 {
				h.ServeHTTP(httptest.NewRecorder(), postWithKey(fmt.Sprintf("sk-%d-%d", i, k)))
			}
		}()
	}
	wg.Wait()
	n := int(s.Evictions())
	require.Positive(t, n)
	for name, o := range map[string]*recorder{"first": o1, "second": o2, "shared by two limiters": shared} {
		o.mu.Lock()
		assert.Equal(t, n, o.evictions, "%s observer", name)
		o.mu.Unlock()
	}
}

// TestNewOnAStoreInUse: building a limiter on a store that other limiters
// are using is safe (run under -race), and the new limiter's observer sees
// the evictions from then on.
func TestNewOnAStoreInUse(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(128))
	busy, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(&recorder{}))
	require.NoError(t, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		h := busy.Middleware(okHandler)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			h.ServeHTTP(httptest.NewRecorder(), postWithKey(fmt.Sprintf("sk-busy-%d", k)))
		}
	}()
	late := &recorder{}
	l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(late))
	close(stop)
	<-done
	require.NoError(t, err)
	// The busy limiter's evictions after the late one subscribed reached
	// it too: count from here, once both are quiet.
	before := s.Evictions()
	late.mu.Lock()
	lateBefore := late.evictions
	late.mu.Unlock()
	h := l.Middleware(okHandler)
	for k := range 300 {
		h.ServeHTTP(httptest.NewRecorder(), postWithKey(fmt.Sprintf("sk-late-%d", k)))
	}
	late.mu.Lock()
	defer late.mu.Unlock()
	assert.Positive(t, s.Evictions()-before)
	assert.Equal(t, int(s.Evictions()-before), late.evictions-lateBefore)
}

// evictFunc is an Observer of a func type: not comparable.
type evictFunc func()

func (evictFunc) Decided(llmrate.DecisionEvent)     {}
func (evictFunc) Reconciled(llmrate.ReconcileEvent) {}
func (evictFunc) FailedOpen(llmrate.FailOpenEvent)  {}
func (f evictFunc) Evicted()                        { f() }

// evictTally is an Observer of a struct holding a map: not comparable.
type evictTally struct {
	n   *atomic.Int64
	tag map[string]string
}

func (evictTally) Decided(llmrate.DecisionEvent)     {}
func (evictTally) Reconciled(llmrate.ReconcileEvent) {}
func (evictTally) FailedOpen(llmrate.FailOpenEvent)  {}
func (o evictTally) Evicted()                        { o.n.Add(1) }

// evictKeys makes n lossy evictions' worth of new keys in s (a store of
// WithMaxKeys(128): one entry per shard), through a limiter of its own
// with no observer, and returns the store's lossy evictions meanwhile.
func evictKeys(t *testing.T, s *llmrate.MemoryStore, n int, tag string) int64 {
	t.Helper()
	l, err := llmrate.New(llmrate.WithStore(s))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	before := s.Evictions()
	h := l.Middleware(okHandler)
	for k := range n {
		h.ServeHTTP(httptest.NewRecorder(), postWithKey(fmt.Sprintf("sk-%s-%d", tag, k)))
	}
	return s.Evictions() - before
}

// TestIncomparableObserversUnsubscribed: an observer whose type is not
// comparable (a func type, a struct holding a map) is unsubscribed from
// the store's evictions by its limiter's Close, and by stop: the store
// does not call it again, while a subscribed one hears every eviction.
func TestIncomparableObserversUnsubscribed(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(128))
	var fn, tally, direct, kept atomic.Int64
	l1, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(evictFunc(func() { fn.Add(1) })))
	require.NoError(t, err)
	l2, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(evictTally{n: &tally, tag: map[string]string{}}))
	require.NoError(t, err)
	stop := s.NotifyEvictions(evictFunc(func() { direct.Add(1) }))
	defer s.NotifyEvictions(evictTally{n: &kept, tag: map[string]string{}})()

	first := evictKeys(t, s, 400, "a")
	require.Positive(t, first)
	for name, n := range map[string]*atomic.Int64{"func": &fn, "map": &tally, "NotifyEvictions": &direct, "kept": &kept} {
		assert.Equal(t, first, n.Load(), "%s observer, subscribed", name)
	}

	require.NoError(t, l1.Close(context.Background()))
	require.NoError(t, l2.Close(context.Background()))
	stop()
	stop() // idempotent
	second := evictKeys(t, s, 400, "b")
	require.Positive(t, second)
	for name, n := range map[string]*atomic.Int64{"func": &fn, "map": &tally, "NotifyEvictions": &direct} {
		assert.Equal(t, first, n.Load(), "%s observer: no Evicted call after Close or stop", name)
	}
	assert.Equal(t, first+second, kept.Load(), "the observer still subscribed hears every eviction")
}

// TestClosedLimitersLeaveNoSubscribers: 1,000 limiters created and closed
// over one store, each with an observer of its own whose type is not
// comparable, leave no subscriber: the evictions after make no call.
func TestClosedLimitersLeaveNoSubscribers(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(128))
	var calls atomic.Int64
	for i := range 1000 {
		var o llmrate.Observer = evictTally{n: &calls, tag: map[string]string{}}
		if i%2 == 0 {
			o = evictFunc(func() { calls.Add(1) })
		}
		l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(o))
		require.NoError(t, err)
		require.NoError(t, l.Close(context.Background()))
	}
	require.Positive(t, evictKeys(t, s, 400, "c"))
	assert.Zero(t, calls.Load(), "no closed limiter's observer is called")
}

// TestSubscribingCostsTheSameAtAnyCount: subscribing to a store's
// evictions (each New on a shared store does) costs the same with 10,000
// observers subscribed as with none: nothing is copied per subscriber.
// Measured in bytes allocated, not time.
func TestSubscribingCostsTheSameAtAnyCount(t *testing.T) {
	s := llmrate.NewMemoryStore()
	perSubscribe := func() uint64 {
		const n = 200
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			s.NotifyEvictions(&countingObserver{})
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	few := perSubscribe()
	for range 10_000 {
		s.NotifyEvictions(&countingObserver{})
	}
	many := perSubscribe()
	t.Logf("bytes per subscription: %d with 200 subscribed, %d with 10,200", few, many)
	assert.Less(t, many, few+1024, "a subscription's cost does not grow with the subscribers (%d bytes at 200, %d at 10,200)", few, many)
}

// TestNewOnASharedStoreCostsLittle: a limiter per tenant or per reload
// over one store costs little to make with the default logger (which
// writes nothing): no per-limiter log sampler, no copy of the store's
// subscribers. Measured in bytes allocated, not time.
func TestNewOnASharedStoreCostsLittle(t *testing.T) {
	s := llmrate.NewMemoryStore()
	const n = 200
	ls := make([]*llmrate.Limiter, 0, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(&countingObserver{}))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated per New", per)
	assert.Less(t, per, uint64(32<<10), "bytes allocated per New")
	for _, l := range ls {
		require.NoError(t, l.Close(context.Background()))
	}
}

// TestInvalidMemoryOptions: NewMemoryStore cannot return an error, so an
// invalid option is kept and reported by Err, and New refuses the store
// with a *ConfigError naming the option.
func TestInvalidMemoryOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		opts   []llmrate.MemoryOption
		option string
	}{
		{"zero", []llmrate.MemoryOption{llmrate.WithMaxKeys(0)}, "WithMaxKeys"},
		{"negative", []llmrate.MemoryOption{llmrate.WithMaxKeys(-5)}, "WithMaxKeys"},
		{"nil", []llmrate.MemoryOption{nil}, "MemoryOption"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := llmrate.NewMemoryStore(c.opts...)
			require.Error(t, s.Err())
			_, err := llmrate.New(llmrate.WithStore(s))
			var ce *llmrate.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, c.option, ce.Option)
		})
	}
	assert.NoError(t, llmrate.NewMemoryStore(llmrate.WithMaxKeys(1)).Err())
}

func benchAdmitReq(key string) llmrate.AdmitRequest {
	free := llmrate.DefaultTiers().Free
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	_ = free
	return llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: huge, WorkspaceLimits: huge, Tokens: 1, Now: time.Unix(1, 0)}
}

// BenchmarkAdmitHotKey: four-bucket admission of one known key, serial.
func BenchmarkAdmitHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		if d, _ := s.Admit(ctx, req); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkFollowHotKey: Follow of one known key's four levels, serial:
// what redisstore's WithFallbackLocal adds to each decision Redis makes.
func BenchmarkFollowHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	req.Workspace = "acme"
	d := llmrate.Decision{Allowed: true, Remaining: [4]int64{5, 500, 50, 5_000}}
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		s.Follow(req, d)
	}
}

// BenchmarkAdmitHotKeyParallel: one known key from every goroutine.
func BenchmarkAdmitHotKeyParallel(b *testing.B) {
	s := llmrate.NewMemoryStore()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := benchAdmitReq("sk-hot")
		i := int64(0)
		for pb.Next() {
			i++
			req.Now = time.Unix(0, i)
			_, _ = s.Admit(ctx, req)
		}
	})
}

// BenchmarkAdmitDistinctKeys: 100,000 keys round-robin, parallel.
func BenchmarkAdmitDistinctKeys(b *testing.B) {
	s := llmrate.NewMemoryStore()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("sk-%08d", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := benchAdmitReq("")
		i := int(time.Now().UnixNano() % 100_000)
		for pb.Next() {
			i++
			req.Key = keys[i%len(keys)]
			req.Workspace = req.Key
			_, _ = s.Admit(ctx, req)
		}
	})
}

// TestAdmitHotPathAllocs: admitting a known key allocates nothing. A
// regression fails CI without timing anything.
func TestAdmitHotPathAllocs(t *testing.T) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-allocs")
	ctx := context.Background()
	_, _ = s.Admit(ctx, req) // the key is now known
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = s.Admit(ctx, req)
		_ = s.Reconcile(ctx, llmrate.ReconcileRequest{Key: req.Key, Workspace: req.Workspace, KeyLimits: req.KeyLimits, WorkspaceLimits: req.WorkspaceLimits, Estimate: 1, Actual: 2, Now: req.Now})
	})
	assert.Zero(t, allocs, "allocations per admission+reconcile of a known key")

	req.Model = "gpt-4o*" // a model entry's buckets: one more hash, no allocation
	_, _ = s.Admit(ctx, req)
	allocs = testing.AllocsPerRun(1000, func() {
		_, _ = s.Admit(ctx, req)
		_ = s.Reconcile(ctx, llmrate.ReconcileRequest{Key: req.Key, Workspace: req.Workspace, Model: req.Model, KeyLimits: req.KeyLimits, WorkspaceLimits: req.WorkspaceLimits, Estimate: 1, Actual: 2, Now: req.Now})
	})
	assert.Zero(t, allocs, "allocations per admission+reconcile of a known key on a model entry")
}

// TestMemoryStoreRefund: a refund gives an admission back in full (one
// request and its estimate, whatever Actual says), to the key's buckets and
// the workspace's, and to a Solo key's single set; a credit stops at a full
// bucket.
func TestMemoryStoreRefund(t *testing.T) {
	t.Parallel()
	s := llmrate.NewMemoryStore()
	now := time.Unix(1_700_000_000, 0)
	kl := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
	wl := llmrate.Limits{RequestsPerMinute: 50, TokensPerMinute: 5000}
	ctx := context.Background()
	admit := func(tokens int64, solo bool) {
		t.Helper()
		r := llmrate.AdmitRequest{Key: "alice", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Tokens: tokens, Now: now}
		if solo {
			r.Key, r.Workspace, r.KeyLimits, r.Solo = "solo", "solo", wl, true
		}
		d, err := s.Admit(ctx, r)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	admit(300, false)
	admit(200, false)
	require.Equal(t, [4]int64{18, 1500, 98, 9500}, s.Levels("alice", "acme", kl, wl, now))
	refund := llmrate.ReconcileRequest{Key: "alice", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl,
		Estimate: 300, Actual: 1_000_000, Refund: true, Now: now}
	require.NoError(t, s.Reconcile(ctx, refund))
	assert.Equal(t, [4]int64{19, 1800, 99, 9800}, s.Levels("alice", "acme", kl, wl, now),
		"one request and the 300 estimate back to all four buckets; Actual ignored")

	refund.Estimate = 900
	require.NoError(t, s.Reconcile(ctx, refund))
	assert.Equal(t, [4]int64{20, 2000, 100, 10000}, s.Levels("alice", "acme", kl, wl, now),
		"a credit stops at capacity (2×10, 2×1000, 2×50, 2×5000)")

	admit(700, true)
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "solo", Workspace: "solo", KeyLimits: wl, WorkspaceLimits: wl,
		Estimate: 500, Actual: 0, Refund: true, Solo: true, Now: now}))
	assert.Equal(t, [4]int64{100, 9800, 100, 9800}, s.Levels("solo", "solo", wl, wl, now),
		"a Solo key's one set of buckets gets one request and 500 back, once")
}

// BenchmarkAdmitDailyWindowHotKey: BenchmarkAdmitHotKey's admission with
// one daily window (requests and tokens) on the key and on the workspace:
// the windowed path's cost beside the default one.
func BenchmarkAdmitDailyWindowHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	day := []llmrate.Window{{Per: 24 * time.Hour, Requests: llmrate.MaxPerMinute, Tokens: llmrate.MaxPerMinute}}
	req.KeyLimits.Windows, req.WorkspaceLimits.Windows = day, day
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		if d, _ := s.Admit(ctx, req); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// TestFollowLowersToReportedLevels: Follow sets each bucket above the
// level a decision reports to that level and leaves lower ones alone; the
// buckets then refill from there, a level below the debt floor is taken at
// the floor, and a Solo request's levels are its workspace's.
func TestFollowLowersToReportedLevels(t *testing.T) {
	s := llmrate.NewMemoryStore()
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	kl := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 6_000}   // capacities 120 and 12,000
	wl := llmrate.Limits{RequestsPerMinute: 600, TokensPerMinute: 60_000} // 1,200 and 120,000
	r := llmrate.AdmitRequest{Key: "sk-f", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Now: t0}

	// A key never seen is full, then lowered: 2 of 120 requests, 500 of
	// 12,000 tokens; the workspace's tokens reported above its level keep
	// their own (120,000 − 0: full, so a report of 200,000 changes nothing).
	s.Follow(r, llmrate.Decision{Remaining: [4]int64{2, 500, 1_000, 200_000}})
	assert.Equal(t, [4]int64{2, 500, 1_000, 120_000}, s.Levels("sk-f", "acme", kl, wl, t0))

	// Lower only: a later report of more leaves the lower level.
	s.Follow(r, llmrate.Decision{Remaining: [4]int64{50, 400, 1_100, 100_000}})
	assert.Equal(t, [4]int64{2, 400, 1_000, 100_000}, s.Levels("sk-f", "acme", kl, wl, t0))

	// Refilled from there: 10 s at 60 RPM is 10 requests, at 6,000 TPM
	// 1,000 tokens; at 600 RPM 100 requests, at 60,000 TPM 10,000 tokens.
	t1 := t0.Add(10 * time.Second)
	assert.Equal(t, [4]int64{12, 1_400, 1_100, 110_000}, s.Levels("sk-f", "acme", kl, wl, t1))

	// The fallback refuses what the shared store had spent: 2 requests
	// left of the key's, so the third in a row is refused.
	for i, want := range []bool{true, true, false} {
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-g", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 1, Now: t0})
		require.NoError(t, err)
		if i == 0 {
			s.Follow(llmrate.AdmitRequest{Key: "sk-g", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Now: t0},
				llmrate.Decision{Remaining: [4]int64{1, 11_000, 900, 100_000}})
			continue // the report after the first admission: 1 request left
		}
		assert.Equal(t, want, d.Allowed, "admission %d", i+1)
	}

	// Debt below the floor is taken at the floor, −2 × 12,000 tokens as
	// of t0; 10 s later 1,000 tokens have refilled it.
	s.Follow(r, llmrate.Decision{Remaining: [4]int64{2, -1_000_000, 1_000, 100_000}})
	assert.Equal(t, int64(-24_000), s.Levels("sk-f", "acme", kl, wl, t0)[llmrate.KeyTokens])
	assert.Equal(t, int64(-23_000), s.Levels("sk-f", "acme", kl, wl, t1)[llmrate.KeyTokens])

	// Solo: one entry, the workspace's levels.
	solo := llmrate.AdmitRequest{Key: "sk-s", Workspace: "sk-s", KeyLimits: kl, WorkspaceLimits: kl, Solo: true, Now: t0}
	s.Follow(solo, llmrate.Decision{Remaining: [4]int64{7, 700, 7, 700}})
	assert.Equal(t, [4]int64{7, 700, 7, 700}, s.Levels("sk-s", "sk-s", kl, kl, t0))
}

// evictionCounter is an Observer that counts lossy evictions.
type evictionCounter struct {
	n sync.Mutex
	c int
}

func (*evictionCounter) Decided(llmrate.DecisionEvent)     {}
func (*evictionCounter) Reconciled(llmrate.ReconcileEvent) {}
func (*evictionCounter) FailedOpen(llmrate.FailOpenEvent)  {}
func (o *evictionCounter) Evicted()                        { o.n.Lock(); o.c++; o.n.Unlock() }

// TestFollowedEntriesGoFirstAndUncounted: entries Follow set are copies of
// what the shared store holds: at the bound they make room before any
// entry the store spent on, in debt or not, and their going is no lossy
// eviction (an alert on evictions stays quiet while the shared store
// answers), so the store keeps its bound and the fallback's own spending.
func TestFollowedEntriesGoFirstAndUncounted(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const bound = 8_192 // 64 entries in each of the store's shards
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(bound))
	o := &evictionCounter{}
	defer s.NotifyEvictions(o)()
	lim := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 10_000} // capacity 2 requests
	own := llmrate.AdmitRequest{Key: "sk-own", Workspace: "sk-own", KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Tokens: 1, Now: t0}
	for range 2 { // the store's own spending: sk-own empty
		d, err := s.Admit(context.Background(), own)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	for i := range 4 * bound { // keys followed, each reported in debt
		k := fmt.Sprintf("sk-%d", i)
		s.Follow(llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Now: t0},
			llmrate.Decision{Remaining: [4]int64{-1, 5_000, -1, 5_000}})
	}
	_, n := s.Len()
	assert.LessOrEqual(t, n, bound, "followed debts do not hold the store beyond its bound")
	assert.Equal(t, int64(0), s.OverBound())
	assert.Equal(t, int64(0), s.Evictions())
	o.n.Lock()
	assert.Equal(t, 0, o.c, "no lossy eviction reported")
	o.n.Unlock()
	d, err := s.Admit(context.Background(), own)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the store's own spending stays: sk-own still empty")

	// Spent on after Follow, an entry is the store's own again.
	k := llmrate.AdmitRequest{Key: "sk-0b", Workspace: "sk-0b", KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Tokens: 1, Now: t0}
	s.Follow(k, llmrate.Decision{Remaining: [4]int64{1, 5_000, 1, 5_000}})
	d, err = s.Admit(context.Background(), k)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	for i := range 4 * bound {
		kk := fmt.Sprintf("sk-x%d", i)
		s.Follow(llmrate.AdmitRequest{Key: kk, Workspace: kk, KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Now: t0},
			llmrate.Decision{Remaining: [4]int64{1, 5_000, 1, 5_000}})
	}
	d, err = s.Admit(context.Background(), k)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "its admission kept: 0 of 2 left")
}

// TestFollowKeepsOwnSpendingCounted: an entry whose own spending is below
// what the shared store reports (the shared store has not been charged it
// yet) is no copy: Follow does not make it the first to go, and it is not
// dropped uncounted while copies remain.
func TestFollowKeepsOwnSpendingCounted(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const bound = 8_192
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(bound))
	lim := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 10_000} // capacity 2 requests
	own := llmrate.AdmitRequest{Key: "sk-own", Workspace: "sk-own", KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Tokens: 1, Now: t0}
	for range 2 {
		d, err := s.Admit(context.Background(), own)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	s.Follow(own, llmrate.Decision{Remaining: [4]int64{2, 20_000, 2, 20_000}}) // the shared store, not charged yet
	for i := range 4 * bound {
		k := fmt.Sprintf("sk-%d", i)
		s.Follow(llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Now: t0},
			llmrate.Decision{Remaining: [4]int64{1, 5_000, 1, 5_000}})
	}
	d, err := s.Admit(context.Background(), own)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "its own 2 admissions still spent")
}
