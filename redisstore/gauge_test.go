package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/llmratetest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gaugedReq is a request on a key with a key gauge of kc and a workspace
// gauge of wc, under buckets far too large to refuse anything here.
func gaugedReq(kc, wc int64) llmrate.AdmitRequest {
	big := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000}
	kl, wl := big, big
	kl.ConcurrentRequests, wl.ConcurrentRequests = kc, wc
	return llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 10,
		ID: llmrate.NewAdmissionID()}
}

func release(t *testing.T, s *redisstore.Store, r llmrate.AdmitRequest, d llmrate.Decision) {
	t.Helper()
	require.NoError(t, s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace,
		KeyLimits: r.KeyLimits, WorkspaceLimits: r.WorkspaceLimits, Estimate: r.Tokens, Actual: r.Tokens,
		ID: r.ID, Receipt: d.Receipt}))
}

// TestGaugeAcrossProcesses: two stores (two processes) on one Redis, 16
// callers each admitting, holding and releasing in a loop: never more than
// the figure in flight at once, counted by the callers themselves (a
// caller counts itself in only once admitted, and out before its release).
func TestGaugeAcrossProcesses(t *testing.T) {
	_, c := redisrig.Start(t)
	stores := redisrig.Stores(t, c, 2)
	const figure = 3
	var inFlight, most, admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		s := stores[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				r := gaugedReq(figure, 0)
				d, err := s.Admit(context.Background(), r)
				if !assert.NoError(t, err) {
					return
				}
				if !d.Allowed {
					assert.Equal(t, llmrate.KeyConcurrent, d.Refused)
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond) // hold the slot a while: the others contend for it
				inFlight.Add(-1)
				release(t, s, r, d)
			}
		}()
	}
	wg.Wait()
	t.Logf("admitted %d, refused %d, most in flight %d", admitted.Load(), refused.Load(), most.Load())
	assert.LessOrEqual(t, most.Load(), int64(figure), "never more than the figure in flight across both processes")
	assert.Positive(t, refused.Load(), "16 callers contend for 3 slots: some are refused")
	assert.Positive(t, admitted.Load())
	for i, s := range stores {
		assert.Zero(t, s.Held(), "store %d holds no slot once every admission was reconciled", i)
	}
	// Every slot was released: a fresh process gets all three.
	for i := range figure {
		d, err := stores[0].Admit(context.Background(), gaugedReq(figure, 0))
		require.NoError(t, err)
		assert.True(t, d.Allowed, "slot %d after every release", i+1)
	}
}

// TestGaugeReleasedOnce: a reconcile sent again, from either process and
// concurrently, releases its slot once; the workspace gauge too.
func TestGaugeReleasedOnce(t *testing.T) {
	_, c := redisrig.Start(t)
	stores := redisrig.Stores(t, c, 2)
	a, b := stores[0], stores[1]
	r1 := gaugedReq(2, 2)
	d1, err := a.Admit(context.Background(), r1)
	require.NoError(t, err)
	require.True(t, d1.Allowed)
	r2 := gaugedReq(2, 2)
	d2, err := b.Admit(context.Background(), r2)
	require.NoError(t, err)
	require.True(t, d2.Allowed)
	d, err := a.Admit(context.Background(), gaugedReq(2, 2))
	require.NoError(t, err)
	require.False(t, d.Allowed, "two in flight, figure 2")

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release(t, stores[i%2], r1, d1)
		}()
	}
	wg.Wait()
	r3 := gaugedReq(2, 2)
	d3, err := b.Admit(context.Background(), r3)
	require.NoError(t, err)
	assert.True(t, d3.Allowed, "the released slot")
	d, err = a.Admit(context.Background(), gaugedReq(2, 2))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "eight reconciles released one slot, not more")
	assert.Equal(t, llmrate.KeyConcurrent, d.Refused)

	// A resent admission (same ID) answers its first decision and takes no
	// second slot: releasing it once frees room for exactly one.
	again, err := b.Admit(context.Background(), r3)
	require.NoError(t, err)
	assert.Equal(t, d3, again, "a resent admission gets its first decision")
	release(t, b, r3, d3)
	d, err = a.Admit(context.Background(), gaugedReq(2, 2))
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = a.Admit(context.Background(), gaugedReq(2, 2))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the resent admission held one slot, not two")
}

// TestGaugeDeadProcessSlotExpires: a process that stops refreshing (closed
// without reconciling: as good as dead) loses its slot a slot life later,
// and not before. Real time: the slot's life is on Redis's clock.
func TestGaugeDeadProcessSlotExpires(t *testing.T) {
	_, c := redisrig.Start(t)
	const ttl = 300 * time.Millisecond
	stores := redisrig.Stores(t, c, 2, redisstore.WithSlotTTL(ttl))
	dead, live := stores[0], stores[1]
	start := time.Now()
	d, err := dead.Admit(context.Background(), gaugedReq(1, 0))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, dead.Close(context.Background()))
	d, err = live.Admit(context.Background(), gaugedReq(1, 0))
	require.NoError(t, err)
	require.False(t, d.Allowed, "the dead process's slot is still held")
	for {
		r := gaugedReq(1, 0)
		d, err = live.Admit(context.Background(), r)
		require.NoError(t, err)
		if d.Allowed {
			release(t, live, r, d)
			break
		}
		require.Less(t, time.Since(start), ttl+2*time.Second, "the dead process's slot never expired")
		time.Sleep(20 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, time.Since(start), ttl, "freed no sooner than its life")
}

// TestGaugeLiveProcessRefreshed: a process that holds a slot for several
// slot lives (a long stream) keeps it: its refresher renews it; the other
// process is refused throughout, until the release.
func TestGaugeLiveProcessRefreshed(t *testing.T) {
	_, c := redisrig.Start(t)
	// Refreshed every ttl/3: a stall of up to a second (a loaded CI
	// machine) does not let a live slot expire; two TTLs are watched.
	const ttl = 1500 * time.Millisecond
	stores := redisrig.Stores(t, c, 2, redisstore.WithSlotTTL(ttl))
	holder, other := stores[0], stores[1]
	r := gaugedReq(0, 1)
	d, err := holder.Admit(context.Background(), r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, 1, holder.Held())
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		o, err := other.Admit(context.Background(), gaugedReq(0, 1))
		require.NoError(t, err)
		require.False(t, o.Allowed, "the live process's slot expired after %v", time.Since(end.Add(-2*ttl)))
		assert.Equal(t, llmrate.WorkspaceConcurrent, o.Refused)
		time.Sleep(50 * time.Millisecond)
	}
	release(t, holder, r, d)
	assert.Zero(t, holder.Held())
	o, err := other.Admit(context.Background(), gaugedReq(0, 1))
	require.NoError(t, err)
	assert.True(t, o.Allowed, "released")
}

// TestGaugeNeedsID: a gauged admission without an ID could never be
// released: refused with llmrate.ErrNoAdmissionID, as the memory store does.
func TestGaugeNeedsID(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c)
	r := gaugedReq(1, 0)
	r.ID = ""
	_, err := s.Admit(context.Background(), r)
	assert.ErrorIs(t, err, llmrate.ErrNoAdmissionID)
}

// TestGaugeWithLeases: with WithLeases a gauged admission bypasses the
// leases (goes to Redis), so two leased processes together never hold more
// slots than the figure, even on a key busy enough to be leased.
func TestGaugeWithLeases(t *testing.T) {
	_, c := redisrig.Start(t)
	stores := redisrig.Stores(t, c, 2, redisstore.WithLeases(0.25))
	plain := gaugedReq(0, 0)
	for i := range 4 { // make the key busy: leases are taken
		d, err := stores[i%2].Admit(context.Background(), plain)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		plain.ID = llmrate.NewAdmissionID()
	}
	var held []llmrate.AdmitRequest
	var decided []llmrate.Decision
	for i := range 2 {
		r := gaugedReq(2, 0)
		d, err := stores[i%2].Admit(context.Background(), r)
		require.NoError(t, err)
		require.True(t, d.Allowed, "slot %d", i+1)
		held, decided = append(held, r), append(decided, d)
	}
	for i := range 2 {
		d, err := stores[i].Admit(context.Background(), gaugedReq(2, 0))
		require.NoError(t, err)
		assert.False(t, d.Allowed, "a third in flight, through store %d", i)
		assert.Equal(t, llmrate.KeyConcurrent, d.Refused)
	}
	release(t, stores[0], held[0], decided[0])
	release(t, stores[0], held[0], decided[0])
	d, err := stores[1].Admit(context.Background(), gaugedReq(2, 0))
	require.NoError(t, err)
	assert.True(t, d.Allowed, "released")
	d, err = stores[1].Admit(context.Background(), gaugedReq(2, 0))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "released once")
}

// TestReservationWithLeases: a reservation bypasses the leases and is
// decided against the Redis level as lease.lua keeps it: refilled only up
// to the capacity less what another process holds on lease. 60 RPM, 6,000
// TPM (12,000 tokens a bucket), share 0.25: process A's lease holds 3,000
// tokens of each tokens bucket, so 2 s of refill (200 tokens) stop at
// 9,000, and 9,100 tokens are 100 short: one second (a script blind to the
// lease would refill to 9,198 and admit at once).
func TestReservationWithLeases(t *testing.T) {
	_, c := redisrig.Start(t)
	clock := llmratetest.NewClock()
	stores := redisrig.Stores(t, c, 2, redisstore.WithLeases(0.25), redisstore.WithClock(clock.Now))
	a, b := stores[0], stores[1]
	lim := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 6000}
	req := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1}
	for range 3 {
		req.ID, req.Now = llmrate.NewAdmissionID(), clock.Now()
		d, err := a.Admit(context.Background(), req)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.Positive(t, a.Leased(), "A admits on a lease: 3,000 tokens of each tokens bucket are out")
	clock.Advance(2 * time.Second)
	req.ID, req.Now, req.Tokens, req.MaxWait = llmrate.NewAdmissionID(), clock.Now(), 9100, 5*time.Second
	d, err := b.Admit(context.Background(), req)
	require.NoError(t, err)
	require.True(t, d.Allowed, "a reservation")
	assert.Equal(t, time.Second, d.Wait, "100 tokens short of 9,100 at 100/s")
	assert.Equal(t, int64(-100), d.Remaining[llmrate.KeyTokens], "debited now, below zero")
}

// TestGaugeReleaseFailedStopsRefresh: a reconcile that cannot reach Redis
// still stops this process refreshing its slots, so a release that never
// lands frees the slot a slot life later rather than never.
func TestGaugeReleaseFailedStopsRefresh(t *testing.T) {
	srv, c := redisrig.Start(t)
	s := redisrig.Stores(t, c, 1)[0]
	r := gaugedReq(1, 1)
	d, err := s.Admit(context.Background(), r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 1, s.Held())
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: r.KeyLimits,
		WorkspaceLimits: r.WorkspaceLimits, Estimate: r.Tokens, Actual: r.Tokens, ID: r.ID, Receipt: d.Receipt})
	require.Error(t, err, "Redis is down")
	assert.Zero(t, s.Held(), "the slot is no longer refreshed")
}

// waitObserver records the waits the limiter reports (DecisionEvent.Wait).
type waitObserver struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (o *waitObserver) Decided(e llmrate.DecisionEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waits = append(o.waits, e.Wait)
}
func (o *waitObserver) Reconciled(llmrate.ReconcileEvent) {}
func (o *waitObserver) FailedOpen(llmrate.FailOpenEvent)  {}
func (o *waitObserver) Evicted()                          {}

func (o *waitObserver) last() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.waits[len(o.waits)-1]
}

// TestLimiterGaugeAndWaitOverRedis: through the limiter on the Redis store,
// a key with a gauge of 1 is refused a second request while its first is
// in flight (429, "concurrent requests"), the slot is released once the
// response has ended, and a request that fits within WithMaxWait is served
// after its wait instead of refused; nothing fails open.
func TestLimiterGaugeAndWaitOverRedis(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Stores(t, c, 1)[0]
	// 6,000 TPM: a bucket of 12,000 tokens refilling 100 a second; every
	// request is estimated (400 bytes / 4) and charged 100 tokens.
	lim := llmrate.Limits{RequestsPerMinute: 100_000, TokensPerMinute: 6000, ConcurrentRequests: 1}
	obs := &waitObserver{}
	tiers := llmrate.DefaultTiers()
	tiers.Free = lim
	l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithTiers(tiers),
		llmrate.WithStoreTimeout(time.Second), llmrate.WithMaxWait(2*time.Second), llmrate.WithObserver(obs))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	entered, release := make(chan struct{}), make(chan struct{})
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"usage":{"prompt_tokens":100,"completion_tokens":0}}`))
	}))
	send := func(hold bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.ContentLength = 400
		r.Header.Set("Authorization", "Bearer sk-gauge")
		if hold {
			r.Header.Set("X-Hold", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.NoError(t, l.Flush(context.Background())) // the reconcile, which releases the slot
		return w
	}
	done := make(chan int)
	go func() { done <- send(true).Code }()
	<-entered
	w := send(false)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "one in flight, figure 1")
	assert.Contains(t, w.Body.String(), "concurrent requests")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
	require.NoError(t, l.Flush(context.Background()))
	assert.Zero(t, s.Held(), "released once the response ended")

	// Drain the tokens bucket one request at a time (the gauge of 1 holds:
	// each ends before the next), until one is told to wait.
	for i := 0; ; i++ {
		require.Less(t, i, 400, "no request was ever told to wait")
		start := time.Now()
		w := send(false)
		took := time.Since(start)
		require.Equal(t, http.StatusOK, w.Code, "request %d: the bucket refills 100 tokens a second, well within 2 s", i)
		if wait := obs.last(); wait > 0 {
			assert.LessOrEqual(t, wait, time.Second, "100 tokens at most, at 100 a second")
			assert.GreaterOrEqual(t, took, wait, "served after its wait")
			break
		}
	}
	assert.Zero(t, l.FailOpens(), "the store enforced the gauge and the wait: nothing failed open")
}
