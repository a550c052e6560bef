package redisstore_test

import (
	"context"
	"errors"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/deadline"
	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// silentSetup is a store on the README's client (MaxRetries −1,
// ContextTimeoutEnabled) through a fault proxy, with the local fallback
// (so a call that fails shows as a fallback decision, Receipt "local",
// instead of an error the limiter would fail open on), and a probe store
// on the same prefix that reads the levels without leases or batching.
func silentSetup(t *testing.T, srv *redistest.Server, opts ...redisstore.Option) (p *faultproxy.Proxy, s, probe *redisstore.Store) {
	t.Helper()
	p = redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.ContextClient(t, p.Addr())
	prefix := redisrig.Prefix()
	s = redisrig.Store(t, c, append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithFallbackLocal()}, opts...)...)
	probe = probeStore(t, c, prefix)
	return p, s, probe
}

// TestSilentReplyDecidedWithinTimeout: Redis runs an admission and its
// reply never comes, on a connection that stays open and quiet (no close,
// no reset: a dead link, a stalled peer). The admission is decided by
// Redis within WithTimeout all the same: a hedge, sent on another
// connection with the admission's identity once the hedge delay passed,
// is answered with the first run's decision. No failure (no fallback
// decision, which the limiter's exact bucket never sees), one hedge, and
// the bucket debited once, on every admission path; with leases the call
// is the one that takes the lease (a renewal).
func TestSilentReplyDecidedWithinTimeout(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p, s, probe := silentSetup(t, srv, m.opts...)
			ctx := context.Background()
			d, err := s.Admit(ctx, soloReq("sk-silent", 100)) // loads the script; not leased (not busy yet)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			p.SilenceNext(1)
			d, err = s.Admit(ctx, soloReq("sk-silent", 100))
			require.NoError(t, err)
			require.True(t, d.Allowed)
			assert.Empty(t, d.Receipt, "decided by Redis, not by the fallback")
			assert.Equal(t, int64(1), p.Stats().Silenced, "the reply was discarded")
			assert.Zero(t, s.Errors(), "a silent reply within the timeout is no failure")
			assert.Equal(t, int64(1), s.Hedges(), "one hedge decided it")
			d, err = probe.Admit(ctx, soloReq("sk-silent", 100))
			require.NoError(t, err)
			require.True(t, d.Allowed)
			lease := int64(0)
			if m.name == "leased" {
				lease = 500 // share 0.25 of 2,000 requests; the tokens bucket's 5,000
				assert.Equal(t, int64(20_000-300-5000), d.Remaining[llmrate.WorkspaceTokens], "debited once, one lease")
			} else {
				assert.Equal(t, int64(20_000-300), d.Remaining[llmrate.WorkspaceTokens], "debited once")
			}
			assert.Equal(t, int64(2000-3)-lease, d.Remaining[llmrate.WorkspaceRequests], "debited once")
		})
	}
}

// TestSilentReconcileAppliedOnce: a reconcile whose reply is silently lost
// after Redis applied it is hedged and applied once, on the plain and the
// leased paths (the leased one sends it to Redis: the lease cannot absorb
// a credit beyond what was used of it).
func TestSilentReconcileAppliedOnce(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range []struct {
		name string
		opts []redisstore.Option
	}{{"plain", []redisstore.Option{redisstore.WithBatching(1)}}, {"leased", []redisstore.Option{redisstore.WithLeases(0.25)}}} {
		t.Run(m.name, func(t *testing.T) {
			p, s, probe := silentSetup(t, srv, m.opts...)
			ctx := context.Background()
			a := soloReq("sk-srec", 15_000)
			d, err := s.Admit(ctx, a)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Empty(t, d.Receipt)
			rr := llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, KeyLimits: a.KeyLimits, WorkspaceLimits: a.WorkspaceLimits,
				Estimate: 15_000, Actual: 12_000, Solo: true, Now: time.Now(), ID: a.ID, Receipt: d.Receipt}
			p.SilenceNext(1)
			require.NoError(t, s.Reconcile(ctx, rr), "decided within the timeout")
			assert.Equal(t, int64(1), p.Stats().Silenced)
			assert.Zero(t, s.Errors())
			assert.Equal(t, int64(1), s.Hedges())
			require.NoError(t, s.Reconcile(ctx, rr), "the caller resends it too")
			d, err = probe.Admit(ctx, soloReq("sk-srec", 1))
			require.NoError(t, err)
			assert.Equal(t, int64(20_000-15_000+3_000-1), d.Remaining[llmrate.WorkspaceTokens], "the 3,000 credited once")
		})
	}
}

// TestSilentGaugedAdmissionAndRelease: an admission under a concurrency
// gauge whose reply is silently lost takes one slot, not two; its
// reconcile, whose reply is lost the same way, releases it once.
func TestSilentGaugedAdmissionAndRelease(t *testing.T) {
	srv := redistest.Start(t)
	p, s, _ := silentSetup(t, srv, redisstore.WithBatching(1))
	ctx := context.Background()
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 10_000, ConcurrentRequests: 2}
	req := func() llmrate.AdmitRequest {
		return llmrate.AdmitRequest{Key: "sk-g", Workspace: "sk-g", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 10, Solo: true, Now: frozen(), ID: llmrate.NewAdmissionID()}
	}
	warm := req()
	d, err := s.Admit(ctx, warm) // loads the script, takes a slot
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: warm.Key, Workspace: warm.Workspace, KeyLimits: lim, WorkspaceLimits: lim,
		Estimate: 10, Actual: 10, Solo: true, Now: time.Now(), ID: warm.ID, Receipt: d.Receipt}))

	a := req()
	p.SilenceNext(1)
	da, err := s.Admit(ctx, a)
	require.NoError(t, err)
	require.True(t, da.Allowed)
	require.NotEqual(t, "local", da.Receipt, "decided by Redis")
	assert.Equal(t, int64(1), s.Hedges())
	db, err := s.Admit(ctx, req())
	require.NoError(t, err)
	require.True(t, db.Allowed, "a's one slot and this one: two of two")
	dc, err := s.Admit(ctx, req())
	require.NoError(t, err)
	require.False(t, dc.Allowed, "the gauge is full: a took one slot, not two")

	p.SilenceNext(1)
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, KeyLimits: lim, WorkspaceLimits: lim,
		Estimate: 10, Actual: 10, Solo: true, Now: time.Now(), ID: a.ID, Receipt: da.Receipt}))
	assert.Equal(t, int64(2), s.Hedges())
	dc, err = s.Admit(ctx, req())
	require.NoError(t, err)
	require.True(t, dc.Allowed, "a's slot was released")
	assert.Equal(t, int64(2), p.Stats().Silenced)
	assert.Zero(t, s.Errors())
}

// TestLateReplyDiscarded: an admission whose reply comes late (held after
// Redis ran it, past the hedge delay) is decided by its hedge; the late
// answer, when it comes, is discarded, and the bucket was debited once.
// The call's first attempt is made on the caller's goroutine and gives up
// on its reply after a few hedge delays (its connection closed with it, as
// go-redis does at a read deadline), then is sent again.
func TestLateReplyDiscarded(t *testing.T) {
	_, c0 := redisrig.Start(t)
	c := redisrig.ContextClient(t, c0.Options().Addr)
	hold := newHoldReplyHook()
	hold.untilDeadline = true
	c.AddHook(hold)
	prefix := redisrig.Prefix()
	s := redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithFallbackLocal())
	ctx := context.Background()
	d, err := s.Admit(ctx, soloReq("sk-late", 100))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	hold.armed.Store(true)
	d, err = s.Admit(ctx, soloReq("sk-late", 100))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Empty(t, d.Receipt, "decided by Redis")
	<-hold.held // the first attempt ran in Redis and its reply is held
	assert.Equal(t, int64(1), s.Hedges())
	close(hold.release) // the late answer comes now (if still awaited), to no one
	probe := probeStore(t, c, prefix)
	d, err = probe.Admit(ctx, soloReq("sk-late", 100))
	require.NoError(t, err)
	assert.Equal(t, int64(20_000-300), d.Remaining[llmrate.WorkspaceTokens], "debited once")
	assert.Zero(t, s.Errors())
}

// TestNoHedgeWhileBreakerOpen: while the breaker is open, the probe that
// Redis does not answer is not hedged (nor is anything else).
func TestNoHedgeWhileBreakerOpen(t *testing.T) {
	srv := redistest.Start(t)
	p, s, _ := silentSetup(t, srv, redisstore.WithBatching(1), redisstore.WithTimeout(200*time.Millisecond), redisstore.WithRetryInterval(0))
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-open", 1))
	require.NoError(t, err)
	// Every reply silent from here: the first failing call may hedge
	// (Redis answered a moment ago), then three failures open the breaker.
	require.NoError(t, p.Set(faultproxy.Faults{SilentReply: 1}))
	for range 3 {
		d, err := s.Admit(ctx, soloReq("sk-open", 1))
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt, "Redis answers no one: the fallback decides")
	}
	require.Equal(t, int64(3), s.Errors())
	before := s.Hedges()
	for range 3 { // probes (retry interval 0), one at a time
		d, err := s.Admit(ctx, soloReq("sk-open", 1))
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
	}
	assert.Equal(t, before, s.Hedges(), "no hedge while the breaker is open")
	assert.LessOrEqual(t, before, int64(3), "at most the first failing call's hedges: Redis answered nothing after")
}

// TestOneStallDoesNotOpenTheBreaker: a stall that times out every call in
// flight at once (eight concurrent admissions whose replies never come)
// is one piece of evidence, not eight failures in a row: the breaker stays
// closed and the next admission, once replies flow again, is decided by
// Redis, not by the fallback for a whole retry interval. Three calls that
// fail one after another, each sent after the previous one failed, still
// open it.
func TestOneStallDoesNotOpenTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	p, s, _ := silentSetup(t, srv, redisstore.WithTimeout(100*time.Millisecond), redisstore.WithRetryInterval(time.Hour))
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-stall", 1))
	require.NoError(t, err)
	require.NoError(t, p.Set(faultproxy.Faults{SilentReply: 1}))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Admit(ctx, soloReq("sk-stall-"+strconv.Itoa(i), 1))
			assert.NoError(t, err)
			assert.Equal(t, "local", d.Receipt, "the stall: the fallback decides")
		}()
	}
	wg.Wait()
	require.Equal(t, int64(8), s.Errors())
	require.NoError(t, p.Set(faultproxy.Faults{}))
	p.Kill() // the silenced connections go (a reset): none is handed out again
	d, err := s.Admit(ctx, soloReq("sk-stall", 1))
	require.NoError(t, err)
	assert.Empty(t, d.Receipt, "one stall left the breaker closed: Redis decides")

	require.NoError(t, p.Set(faultproxy.Faults{SilentReply: 1}))
	for range 3 {
		d, err := s.Admit(ctx, soloReq("sk-stall", 1))
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
	}
	require.NoError(t, p.Set(faultproxy.Faults{}))
	d, err = s.Admit(ctx, soloReq("sk-stall", 1))
	require.NoError(t, err)
	assert.Equal(t, "local", d.Receipt, "three failures in a row opened it (retry interval: an hour)")
}

// nearDeadline is a caller's context whose deadline is always left from
// now and that never ends: every call under it has too little time for a
// call's first attempt to be awaited on the caller's goroutine and
// sent again (a deadline within about a millisecond, or a WithTimeout that
// short), deterministically, on any machine.
type nearDeadline struct {
	context.Context
	left time.Duration
}

func (c nearDeadline) Deadline() (time.Time, bool) { return time.Now().Add(c.left), true }

// TestHedgesCountOnlyCallsSentAgain: Hedges counts calls sent again, so
// it equals the scripts Redis ran beyond one per call. A call with
// too little time left for its first attempt to be made on the caller's
// goroutine sends that attempt from a goroutine, once: no hedge is counted
// for it.
func TestHedgesCountOnlyCallsSentAgain(t *testing.T) {
	srv := redistest.Start(t)
	_, s, _ := silentSetup(t, srv, redisstore.WithBatching(1), redisstore.WithTimeout(2*time.Second))
	direct := redisrig.Client(t, srv.Addr)
	ran := func() int64 { // EVALSHAs Redis ran (a new connection's handshake is no script)
		info, err := direct.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(info)
		require.NotNil(t, m, info)
		n, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		return n
	}
	_, err := s.Admit(context.Background(), soloReq("sk-count", 1)) // loads the script; Redis answering
	require.NoError(t, err)
	runs, hedges := ran(), s.Hedges()
	const calls = 5
	for range calls {
		d, err := s.Admit(nearDeadline{context.Background(), 800 * time.Microsecond}, soloReq("sk-count", 1))
		require.NoError(t, err)
		require.Empty(t, d.Receipt, "decided by Redis")
	}
	// A hedge still in flight reaches Redis within its attempt's deadline:
	// wait (a while) until every hedge counted has, then compare.
	for end := time.Now().Add(5 * time.Second); ran()-runs < calls+s.Hedges()-hedges && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, s.Hedges()-hedges, ran()-runs-calls, "hedges counted: the scripts Redis ran beyond one per call")
}

// TestSilentReplyAfterAQuietSpell: a store that has made no call for
// longer than WithTimeout (a gateway with little traffic), whose Redis
// answered its last call, still hedges its next call when that reply is
// silent: the admission is decided by Redis, not by the fallback at the
// timeout.
func TestSilentReplyAfterAQuietSpell(t *testing.T) {
	srv := redistest.Start(t)
	// 200 ms calls (a first hedge after 50 ms): with 50 ms calls, CI under
	// -race saw a first hedge's answer outlast its 12.5 ms delay, and a
	// second hedge sent.
	p, s, _ := silentSetup(t, srv, redisstore.WithTimeout(200*time.Millisecond))
	ctx := context.Background()
	d, err := s.Admit(ctx, soloReq("sk-quiet", 1))
	require.NoError(t, err)
	require.Empty(t, d.Receipt)
	time.Sleep(450 * time.Millisecond) // idle past WithTimeout: no answer within it
	p.SilenceNext(1)
	d, err = s.Admit(ctx, soloReq("sk-quiet", 1))
	require.NoError(t, err)
	assert.Empty(t, d.Receipt, "decided by Redis, not the fallback")
	assert.Zero(t, s.Errors())
	assert.Equal(t, int64(1), s.Hedges())
}

// TestSilentReplyWithAnotherCallInFlight: alone or with another call in
// flight, a silently lost reply is sent again after inlineWaitFactor hedge
// delays (at least 100 ms), not half of the call's time: with a
// WithTimeout of 1 s, a wait of about 100 ms rather than 500 (review
// reproducer: 501 ms with another call in flight).
func TestSilentReplyWithAnotherCallInFlight(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.ContextClient(t, p.Addr())
	var armed atomic.Bool // the next script call waits 25 ms before it is sent: another call in flight meanwhile
	in := make(chan struct{})
	c.AddHook(scriptHook(func(context.Context, redis.Cmder) error {
		if armed.CompareAndSwap(true, false) {
			close(in)
			time.Sleep(25 * time.Millisecond)
		}
		return nil
	}))
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithFallbackLocal(), redisstore.WithBatching(1), redisstore.WithTimeout(time.Second))
	ctx := context.Background()
	learnHedgeDelay(t, s)
	lost := func() (time.Duration, string) {
		p.SilenceNext(1)
		t0 := time.Now()
		d, err := s.Admit(ctx, soloReq("sk-target", 1))
		require.NoError(t, err)
		return time.Since(t0), d.Receipt
	}
	alone, _ := lost()
	done := make(chan struct{})
	armed.Store(true)
	go func() {
		defer close(done)
		_, _ = s.Admit(ctx, soloReq("sk-hold", 1)) // another tenant's call, in flight 25 ms
	}()
	<-in
	withOther, receipt := lost()
	<-done
	t.Logf("a silently lost reply: %v alone, %v with one other call in flight (receipt %q, hedges %d)", alone, withOther, receipt, s.Hedges())
	require.Less(t, alone, 250*time.Millisecond, "alone, a lost reply is sent again after about 100 ms (16 delays, at least 100 ms), not half of a long WithTimeout")
	require.Less(t, withOther, 250*time.Millisecond, "with another call in flight, the same")
}

// TestAttemptsEndWhenTheCallReturns: a call's attempts on goroutines (its
// silent first attempt, the hedge that decided it) end when the call
// returns, even where the call's context lives on: under the limiter it
// is shared with the calls ending in the same millisecond
// (internal/deadline) and ends only after the last of them returns. An
// attempt still queued for a connection then gives up, and a lost reply
// is not sent again, for a call already decided.
func TestAttemptsEndWhenTheCallReturns(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.ContextClient(t, p.Addr())
	var mu sync.Mutex
	var attempts []context.Context // the context of every script call sent
	c.AddHook(scriptHook(func(ctx context.Context, _ redis.Cmder) error {
		mu.Lock()
		attempts = append(attempts, ctx)
		mu.Unlock()
		return nil
	}))
	// The store's timeout no shorter than the call's: the store's calls
	// run on the caller's context as is (as under the limiter with
	// timeouts alike).
	s := redisrig.Store(t, c, redisstore.WithPrefix(redisrig.Prefix()), redisstore.WithClock(frozen), redisstore.WithTimeout(4*time.Second))
	_, err := s.Admit(context.Background(), soloReq("sk-ends", 100)) // loads the script
	require.NoError(t, err)

	// Two calls ending in the same millisecond: the other is still
	// running (held) when this one returns.
	now := time.Now()
	ctx, r := deadline.Bound(context.Background(), now, 3*time.Second)
	other, rOther := deadline.Bound(context.Background(), now, 3*time.Second)
	defer rOther.Release()
	mu.Lock()
	attempts = nil
	mu.Unlock()
	p.SilenceNext(1)
	d, err := s.Admit(ctx, soloReq("sk-ends", 100))
	r.Release()
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(1), s.Hedges(), "a hedge decided the call")
	require.NoError(t, other.Err(), "the other call's context lives on")

	mu.Lock()
	sent := attempts
	mu.Unlock()
	require.GreaterOrEqual(t, len(sent), 2, "the silent attempt and its hedge")
	for i, a := range sent {
		select {
		case <-a.Done():
		case <-time.After(300 * time.Millisecond):
			t.Fatalf("attempt %d's context not done 300 ms after its call returned (its deadline: the call's, 3 s from its start, plus WithTimeout)", i)
		}
	}
}

// TestSilentReplyOnARetryingClient: the same silent reply on a client
// with go-redis's default MaxRetries (3), after the store learned its
// hedge delay (so the first attempt waits inline), with no fallback. The
// call is decided by Redis all the same: go-redis does not retry the
// timed-out attempt itself, sleeping its backoff (here longer than the
// call has) while the hedge waits; the store sends it again with its
// identity. Before, the call failed at its deadline: every silent reply
// on such a client was a fail-open under the limiter.
func TestSilentReplyOnARetryingClient(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.NewClient(t, &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true,
		MinRetryBackoff: time.Second, MaxRetryBackoff: 2 * time.Second}) // MaxRetries: go-redis's default
	prefix := redisrig.Prefix()
	s := redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithTimeout(400*time.Millisecond))
	ctx := context.Background()
	learnHedgeDelay(t, s)
	hedges := s.Hedges()
	p.SilenceNext(1)
	t0 := time.Now()
	d, err := s.Admit(ctx, soloReq("sk-retrying", 100))
	took := time.Since(t0)
	require.NoError(t, err, "decided within WithTimeout, not failed at its end")
	require.True(t, d.Allowed)
	assert.Less(t, took, 400*time.Millisecond)
	assert.Equal(t, int64(1), p.Stats().Silenced)
	assert.Greater(t, s.Hedges(), hedges, "the store sent it again, not go-redis")
	d, err = probeStore(t, c, prefix).Admit(ctx, soloReq("sk-retrying", 100))
	require.NoError(t, err)
	assert.Equal(t, int64(2000-2), d.Remaining[llmrate.WorkspaceRequests], "debited once")
}

// TestInlineAttemptDoesNotWaitOutAHungDial: a first attempt made inline
// finds no idle connection, and the connection go-redis dials for it
// hangs (a SYN into a blackhole, a handshake lost). go-redis waits for a
// dial until the attempt's context is done, whatever its deadline: the
// attempt's context ends at its wait (half the call's time here), and the
// call is sent again on a goroutine, on a connection dialed anew. Before,
// the inline attempt waited out the whole call, and it failed.
func TestInlineAttemptDoesNotWaitOutAHungDial(t *testing.T) {
	srv := redistest.Start(t)
	var hang atomic.Bool
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var nd net.Dialer
	c := redisrig.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 4,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if hang.CompareAndSwap(true, false) {
				<-release
				return nil, errors.New("the hung dial, released")
			}
			return nd.DialContext(ctx, network, addr)
		}})
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithTimeout(400*time.Millisecond))
	ctx := context.Background()
	learnHedgeDelay(t, s)
	require.Equal(t, uint32(1), c.PoolStats().TotalConns, "one call at a time: one connection")
	held := make(chan struct{})
	go func() { // holds the idle connection while the admission runs
		defer close(held)
		_ = c.BLPop(context.Background(), 1500*time.Millisecond, "llmrate-test-never-pushed").Err()
	}()
	for c.PoolStats().IdleConns != 0 {
		runtime.Gosched()
	}
	hang.Store(true)
	t0 := time.Now()
	d, err := s.Admit(ctx, soloReq("sk-dial", 100))
	took := time.Since(t0)
	require.NoError(t, err, "decided on a connection dialed anew, not failed at the call's end")
	require.True(t, d.Allowed)
	assert.False(t, hang.Load(), "the admission's first attempt waited on the hung dial")
	assert.Less(t, took, 400*time.Millisecond)
	<-held
}

// TestCallWithoutIdentityNotRerunByGoRedis: an admission without an ID
// (a caller of the store itself) whose reply is lost to a reset after
// Redis ran it, on a client with go-redis's default MaxRetries. It fails
// (the store cannot know whether Redis ran it) and Redis debited it once:
// go-redis does not send it again, which, with no identity to answer a
// repeat by, would debit it once per retry.
func TestCallWithoutIdentityNotRerunByGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.NewClient(t, &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true}) // MaxRetries: go-redis's default
	prefix := redisrig.Prefix()
	s := redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1))
	ctx := context.Background()
	r := soloReq("sk-noid", 100)
	r.ID = ""
	_, err := s.Admit(ctx, r) // loads the script
	require.NoError(t, err)
	require.NoError(t, p.Set(faultproxy.Faults{ResetReply: 1}))
	_, err = s.Admit(ctx, r)
	require.Error(t, err, "the reply was lost, and the call has no identity to send it again with")
	require.NoError(t, p.Set(faultproxy.Faults{}))
	assert.Equal(t, int64(1), p.Stats().ResetReply, "sent once")
	d, err := probeStore(t, redisrig.Client(t, srv.Addr), prefix).Admit(ctx, soloReq("sk-noid", 100))
	require.NoError(t, err)
	assert.Equal(t, int64(2000-3), d.Remaining[llmrate.WorkspaceRequests], "debited once, not once per retry")
}

// TestInlineAttemptEndsAtCallerCancel: a direct caller of the store
// cancels its context 20 ms into a call whose inline first attempt waits
// for the pool's one connection (held by a BLPOP until 60 ms; the inline
// wait is 100 ms). The call ends at the cancellation with
// context.Canceled, and nothing is debited for a caller that gave up: the
// attempt's context ends at its wait or its caller's end, whichever is
// first.
func TestInlineAttemptEndsAtCallerCancel(t *testing.T) {
	srv := redistest.Start(t)
	c := redisrig.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 1})
	prefix := redisrig.Prefix()
	s := redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithTimeout(time.Second))
	learnHedgeDelay(t, s)
	held := make(chan struct{})
	go func() { // holds the pool's one connection until the push below
		defer close(held)
		_ = c.BLPop(context.Background(), 2*time.Second, prefix+"-held").Err()
	}()
	other := redisrig.Client(t, srv.Addr)
	time.AfterFunc(60*time.Millisecond, func() { other.LPush(context.Background(), prefix+"-held", "x") })
	for c.PoolStats().IdleConns != 0 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	t0 := time.Now()
	_, err := s.Admit(ctx, soloReq("sk-cancel", 100))
	took := time.Since(t0)
	<-held
	assert.ErrorIs(t, err, context.Canceled, "the caller cancelled at 20 ms")
	assert.Less(t, took, 50*time.Millisecond, "the call ended at its caller's cancellation")
	d, err := probeStore(t, other, prefix).Admit(context.Background(), soloReq("sk-cancel", 100))
	require.NoError(t, err)
	assert.Equal(t, int64(2000-1), d.Remaining[llmrate.WorkspaceRequests], "nothing debited for the caller that gave up")
}

// learnHedgeDelay makes two hedge windows of lone admissions (2,100, over
// the 1,024 a window holds) through s, so that s has learned its hedge
// delay (at its floor on a local Redis) and makes its first attempts
// inline from then on.
func learnHedgeDelay(t *testing.T, s *redisstore.Store) {
	t.Helper()
	for range 2100 {
		_, err := s.Admit(context.Background(), soloReq("sk-learn", 0))
		require.NoError(t, err)
	}
}
