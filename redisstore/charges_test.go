package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFallbackAdmissionsChargedToRedis: what the local fallback admits
// while Redis does not answer is charged to Redis once it answers again —
// one request and the tokens consumed each, on every path — so that the
// processes sharing the buckets do not also spend it: the admission's
// usage folded into its charge when it came first, sent to Redis after it
// otherwise.
func TestFallbackAdmissionsChargedToRedis(t *testing.T) {
	three := llmrate.Limits{RequestsPerMinute: 3, TokensPerMinute: 1_000} // capacity 6 requests, 2,000 tokens
	gauged := three
	gauged.ConcurrentRequests = 100
	windowed := withWindows(three, llmrate.Window{Per: 24 * time.Hour, Requests: 1_000})
	quota := withWindows(three, llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: 1_000, Tokens: 10_000})
	ws := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 100_000} // 2,000 requests, 200,000 tokens
	paths := []struct {
		name    string
		opts    []redisstore.Option
		lim     llmrate.Limits
		reserve int64
	}{
		{"plain", []redisstore.Option{redisstore.WithBatching(1)}, three, 0},
		{"batched", []redisstore.Option{redisstore.WithBatching(16)}, three, 0},
		{"leased", []redisstore.Option{redisstore.WithLeases(0.25)}, three, 0},
		{"gauged", []redisstore.Option{redisstore.WithBatching(1)}, gauged, 0},
		{"windowed", []redisstore.Option{redisstore.WithBatching(1)}, windowed, 0},
		{"reserved", []redisstore.Option{redisstore.WithBatching(1)}, three, 1},
		{"quota", []redisstore.Option{redisstore.WithBatching(1)}, quota, 0},
	}
	for _, pt := range paths {
		t.Run(pt.name, func(t *testing.T) {
			srv, p, c := faultyRedis(t)
			prefix := redisrig.Prefix()
			opts := append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
				redisstore.WithTimeout(200 * time.Millisecond), redisstore.WithRetryInterval(0)}, pt.opts...)
			s := redisrig.Store(t, c, opts...)
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			ctx := context.Background()
			req := func(key string, tokens int64) llmrate.AdmitRequest {
				return llmrate.AdmitRequest{Key: key, Workspace: "acme", KeyLimits: pt.lim, WorkspaceLimits: ws,
					Tokens: tokens, Reserve: pt.reserve, Now: frozen(), ID: llmrate.NewAdmissionID()}
			}
			rec := func(a llmrate.AdmitRequest, d llmrate.Decision, actual int64) llmrate.ReconcileRequest {
				return llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, KeyLimits: a.KeyLimits, WorkspaceLimits: a.WorkspaceLimits,
					Estimate: a.Tokens, Actual: actual, Now: frozen(), ID: a.ID, Receipt: d.Receipt}
			}

			p.setDown(true)
			a1, a2 := req("sk-a", 10), req("sk-a", 10)
			d1, err := s.Admit(ctx, a1)
			require.NoError(t, err)
			d2, err2 := s.Admit(ctx, a2)
			require.NoError(t, err2)
			require.True(t, d1.Allowed && d2.Allowed, "the fallback admits a key it holds full")
			require.Equal(t, "local", d1.Receipt)
			require.NoError(t, s.Reconcile(ctx, rec(a1, d1, 30)), "a1's usage while Redis is down: into its charge")

			p.setDown(false)
			d, err := s.Admit(ctx, req("sk-b", 10))
			require.NoError(t, err)
			require.NotEqual(t, "local", d.Receipt, "Redis answers")
			s.WaitCharges()
			sent, lost := s.Charges()
			assert.Equal(t, [2]int64{2, 0}, [2]int64{sent, lost}, "both fallback admissions charged")
			require.NoError(t, s.Reconcile(ctx, rec(a2, d2, 4)), "a2's usage after its charge: to Redis as well")

			probe := probeStore(t, redisrig.Client(t, srv.Addr), prefix)
			pr := req("sk-a", 0)
			pr.Reserve = 0
			pd, err := probe.Admit(ctx, pr)
			require.NoError(t, err)
			require.True(t, pd.Allowed)
			assert.Equal(t, int64(6-2-1), pd.Remaining[llmrate.KeyRequests], "Redis holds the fallback's 2 requests (and the probe's)")
			assert.Equal(t, int64(2_000-30-4), pd.Remaining[llmrate.KeyTokens], "Redis holds what they consumed: 30 and 4")
			if pt.name != "leased" { // sk-b's lease is out of the workspace's levels
				assert.Equal(t, int64(2_000-2-1-1), pd.Remaining[llmrate.WorkspaceRequests])
				assert.Equal(t, int64(200_000-30-4-10), pd.Remaining[llmrate.WorkspaceTokens])
			}
			if pt.name == "windowed" {
				require.Len(t, pd.KeyWindows, 1)
				assert.Equal(t, int64(1_000-2-1), pd.KeyWindows[0].Requests, "the day's window holds them too")
			}
			if pt.name == "quota" {
				require.Len(t, pd.KeyWindows, 1)
				assert.Equal(t, int64(1_000-2-1), pd.KeyWindows[0].Requests, "the month's quota holds them too")
				assert.Equal(t, int64(10_000-30-4), pd.KeyWindows[0].Tokens)
			}
		})
	}
}

// TestFallbackChargeSkipsWhatRedisDecided: an admission whose every reply
// was lost while Redis ran it is decided by the fallback, and Redis has
// debited it already (its identity record says so): it is not charged
// again, and its reconcile goes to Redis.
func TestFallbackChargeSkipsWhatRedisDecided(t *testing.T) {
	three := llmrate.Limits{RequestsPerMinute: 3, TokensPerMinute: 1_000}
	for _, lim := range []llmrate.Limits{three, withWindows(three, llmrate.Window{Per: 24 * time.Hour, Requests: 1_000})} {
		t.Run(fmt.Sprintf("windows=%d", len(lim.Windows)), func(t *testing.T) {
			srv, p, c := faultyRedis(t)
			prefix := redisrig.Prefix()
			s := redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
				redisstore.WithTimeout(100*time.Millisecond), redisstore.WithBatching(1))
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			ctx := context.Background()
			req := func(key string, tokens int64) llmrate.AdmitRequest {
				return llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Solo: true,
					Tokens: tokens, Now: frozen(), ID: llmrate.NewAdmissionID()}
			}
			p.hang.Store(true) // Redis runs the calls; no reply comes back
			a := req("sk-a", 100)
			d, err := s.Admit(ctx, a)
			require.NoError(t, err)
			require.Equal(t, "local", d.Receipt, "no reply: the fallback decides")
			require.True(t, d.Allowed)
			p.hang.Store(false)
			p.closeAll()
			_, err = s.Admit(ctx, req("sk-b", 1))
			require.NoError(t, err)
			s.WaitCharges()
			sent, _ := s.Charges()
			assert.Equal(t, int64(1), sent, "found decided in Redis")
			require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "sk-a", Workspace: "sk-a", KeyLimits: lim, WorkspaceLimits: lim, Solo: true,
				Estimate: 100, Actual: 40, Now: frozen(), ID: a.ID, Receipt: d.Receipt}))

			probe := probeStore(t, redisrig.Client(t, srv.Addr), prefix)
			pd, err := probe.Admit(ctx, req("sk-a", 0))
			require.NoError(t, err)
			assert.Equal(t, int64(6-1-1), pd.Remaining[llmrate.WorkspaceRequests], "debited once, by Redis's own decision (and the probe)")
			assert.Equal(t, int64(2_000-40), pd.Remaining[llmrate.WorkspaceTokens], "its usage reconciled in Redis")
		})
	}
}

// chargeStore is the store the charge tests run: on c, a frozen clock,
// the local fallback, 200 ms calls, one admission per call and the
// breaker's probe at once; closed at the test's end.
func chargeStore(t *testing.T, c *redis.Client, opts ...redisstore.Option) *redisstore.Store {
	s := redisrig.Store(t, c, append([]redisstore.Option{redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(200 * time.Millisecond), redisstore.WithBatching(1), redisstore.WithRetryInterval(0)}, opts...)...)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// scriptHook runs before every script call (EVALSHA or EVAL) a client
// sends, with the call's context; an error it returns fails the call, as
// Redis or the network would.
type scriptHook func(ctx context.Context, cmd redis.Cmder) error

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			if err := h(ctx, cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}
func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isCharge reports whether script call cmd is a charge (its mode argument
// "c"), of the admission with identity id when id is not empty.
func isCharge(cmd redis.Cmder, id string) bool {
	args := cmd.Args()
	return slices.Contains(args, any("c")) && (id == "" || slices.ContainsFunc(args, func(a any) bool {
		s, ok := a.(string)
		return ok && strings.Contains(s, id)
	}))
}

// TestChargeFixedOnceSent: a charge Redis applied but whose reply was lost
// is sent again as it was (Redis answers the repeat as applied); the
// admission's reconcile that came meanwhile is not folded into it (the
// repeat would drop it) but fails until the charge has landed, and then
// goes to Redis: Redis holds what the request consumed.
func TestChargeFixedOnceSent(t *testing.T) {
	srv, p, c := faultyRedis(t)
	var armed atomic.Bool // from the next charge on, the proxy holds every reply: Redis runs it, its reply never comes
	c.AddHook(scriptHook(func(_ context.Context, cmd redis.Cmder) error {
		if armed.Load() && isCharge(cmd, "") && armed.CompareAndSwap(true, false) {
			p.hang.Store(true)
		}
		return nil
	}))
	prefix := redisrig.Prefix()
	s := redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(100*time.Millisecond), redisstore.WithBatching(1), redisstore.WithRetryInterval(0))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-warm", 1)) // connects and loads the scripts
	require.NoError(t, err)

	p.setDown(true)
	a := soloReq("sk-a", 100)
	da, err := s.Admit(ctx, a)
	require.NoError(t, err)
	require.Equal(t, "local", da.Receipt)
	p.setDown(false)
	armed.Store(true)
	_, err = s.Admit(ctx, soloReq("sk-b", 1)) // Redis answers: the charge goes, is applied, its reply held
	require.NoError(t, err)
	s.WaitCharges()
	sent, _ := s.Charges()
	require.Equal(t, int64(0), sent, "no answer to the charge")
	p.hang.Store(false)
	p.closeAll()

	rec := llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, KeyLimits: solo1k, WorkspaceLimits: solo1k,
		Estimate: 100, Actual: 5_000, Solo: true, Now: frozen(), ID: a.ID, Receipt: da.Receipt}
	require.Error(t, s.Reconcile(ctx, rec), "the charge may have landed: its usage waits (the limiter retries)")
	_, err = s.Admit(ctx, soloReq("sk-b", 1)) // the charge goes again, answered as applied
	require.NoError(t, err)
	s.WaitCharges()
	sent, lost := s.Charges()
	require.Equal(t, [2]int64{1, 0}, [2]int64{sent, lost})
	require.NoError(t, s.Reconcile(ctx, rec), "retried: to Redis now")

	probe := probeStore(t, redisrig.Client(t, srv.Addr), prefix)
	pd, err := probe.Admit(ctx, soloReq("sk-a", 0))
	require.NoError(t, err)
	assert.Equal(t, int64(20_000-5_000), pd.Remaining[llmrate.WorkspaceTokens], "Redis holds what the request consumed, once")
	assert.Equal(t, int64(2_000-1-1), pd.Remaining[llmrate.WorkspaceRequests], "its request charged once (and the probe's)")
}

// TestCloseChargesWithinItsContext: Close sends the pending charges only
// until its context is done, background flusher included; the rest are
// counted lost.
func TestCloseChargesWithinItsContext(t *testing.T) {
	_, p, c := faultyRedis(t)
	var slow atomic.Bool // every script call 20 ms late: a Redis that far away
	c.AddHook(scriptHook(func(context.Context, redis.Cmder) error {
		if slow.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}))
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(200*time.Millisecond), redisstore.WithBatching(1), redisstore.WithRetryInterval(20*time.Millisecond))
	ctx := context.Background()
	p.setDown(true)
	local := 0
	for range 200 { // the breaker opens after three: the rest go to the fallback at once
		d, err := s.Admit(ctx, soloReq("sk-a", 1))
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
		local++
	}
	p.setDown(false)
	slow.Store(true)
	require.Eventually(t, func() bool { // a probe gets through and starts the flusher: 200 charges or more, two calls of 20 ms each
		d, err := s.Admit(ctx, soloReq("sk-b", 1))
		if d.Receipt == "local" {
			local++
		}
		return err == nil && d.Receipt == ""
	}, 5*time.Second, 5*time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.NoError(t, s.Close(cctx))
	assert.Less(t, time.Since(start), time.Second, "bounded by its context (and one call in flight)")
	sent, lost := s.Charges()
	assert.Equal(t, int64(local), sent+lost, "each charge sent or counted lost")
	assert.Positive(t, lost)
}

// TestChargedAwaitingReconcileMakeRoom: charged admissions whose reconcile
// never comes (usage equal to the estimate sends none) do not hold the
// tracking bound against a later outage: the oldest are forgotten for the
// new ones, which are charged.
func TestChargedAwaitingReconcileMakeRoom(t *testing.T) {
	defer redisstore.SetMaxCharges(64)()
	_, p, c := faultyRedis(t)
	big := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000}
	s := chargeStore(t, c)
	ctx := context.Background()
	req := func() llmrate.AdmitRequest {
		return llmrate.AdmitRequest{Key: "sk-a", Workspace: "sk-a", KeyLimits: big, WorkspaceLimits: big, Solo: true, Tokens: 1, Now: frozen(), ID: llmrate.NewAdmissionID()}
	}
	outage := func(n int) {
		t.Helper()
		p.setDown(true)
		for range n {
			d, err := s.Admit(ctx, req())
			require.NoError(t, err)
			require.Equal(t, "local", d.Receipt)
		}
		p.setDown(false)
		require.Eventually(t, func() bool { // the breaker's probe gets through
			d, err := s.Admit(ctx, req())
			return err == nil && d.Receipt == ""
		}, 5*time.Second, 5*time.Millisecond)
		s.WaitCharges()
	}
	outage(64)
	sent, lost := s.Charges()
	require.Equal(t, [2]int64{64, 0}, [2]int64{sent, lost}, "the bound's worth charged")
	outage(10)
	sent, lost = s.Charges()
	assert.Equal(t, [2]int64{74, 0}, [2]int64{sent, lost}, "the next outage's charged too")
}

// TestChargeNotSentWhileBreakerOpen: a charge goes to Redis on the
// breaker's terms: while it is open Close does not call Redis for the
// pending ones (counted lost), and no failure is counted for them.
func TestChargeNotSentWhileBreakerOpen(t *testing.T) {
	_, p, c := faultyRedis(t)
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(100*time.Millisecond), redisstore.WithBatching(1), redisstore.WithRetryInterval(time.Hour))
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-w", 1))
	require.NoError(t, err)
	p.hang.Store(true)
	for range 3 { // three timeouts open the breaker
		d, err := s.Admit(ctx, soloReq("sk-a", 1))
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
	}
	before := s.Errors()
	require.NoError(t, s.Close(ctx))
	assert.Equal(t, before, s.Errors(), "no call, no failure")
	sent, lost := s.Charges()
	assert.Equal(t, [2]int64{0, 3}, [2]int64{sent, lost})
	p.hang.Store(false)
	p.closeAll()
}

// TestAdmissionWithoutIDChargeCountedLost: a fallback admission without an
// ID cannot be charged (a charge must be safe to resend): it is counted
// lost, not dropped silently.
func TestAdmissionWithoutIDChargeCountedLost(t *testing.T) {
	_, p, c := faultyRedis(t)
	s := chargeStore(t, c)
	ctx := context.Background()
	p.setDown(true)
	r := soloReq("sk-a", 10)
	r.ID = ""
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, "local", d.Receipt)
	p.setDown(false)
	_, err = s.Admit(ctx, soloReq("sk-b", 1))
	require.NoError(t, err)
	s.WaitCharges()
	sent, lost := s.Charges()
	assert.Equal(t, [2]int64{0, 1}, [2]int64{sent, lost})
}

// TestChargeThatMayHaveLandedGoesFirst: a charge whose debit was sent and
// failed goes first the next time Redis answers, ahead of the hundreds
// queued behind it, so that its reconcile (which fails until the charge
// has landed) gets to Redis within the limiter's few seconds of retries
// (review reproducer: sent to the back, it was still unsettled after 5 s,
// and the 4,900 tokens of usage never reached Redis).
func TestChargeThatMayHaveLandedGoesFirst(t *testing.T) {
	srv, p, c := faultyRedis(t)
	prefix := redisrig.Prefix()
	big := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000}
	s := chargeStore(t, c, redisstore.WithPrefix(prefix))
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-warm", 1))
	require.NoError(t, err)
	p.setDown(true)
	a := soloReq("sk-a", 100)
	da, err := s.Admit(ctx, a)
	require.NoError(t, err)
	require.Equal(t, "local", da.Receipt)
	for range 300 {
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-o", Workspace: "sk-o", KeyLimits: big, WorkspaceLimits: big, Solo: true,
			Tokens: 1, Now: frozen(), ID: llmrate.NewAdmissionID()})
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
	}
	// a's charge fails once, as a connection reset would; every script
	// call is 10 ms late, so the 300 take 6 s to drain.
	var armed, slow atomic.Bool
	fired := make(chan struct{})
	c.AddHook(scriptHook(func(_ context.Context, cmd redis.Cmder) error {
		if armed.Load() && isCharge(cmd, a.ID) && armed.CompareAndSwap(true, false) {
			close(fired)
			return errors.New("injected: connection reset")
		}
		if slow.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}))
	armed.Store(true)
	slow.Store(true)
	p.setDown(false)
	require.Eventually(t, func() bool {
		d, err := s.Admit(ctx, soloReq("sk-b", 1))
		return err == nil && d.Receipt == ""
	}, 5*time.Second, 5*time.Millisecond)
	<-fired // a's debit sent, and failed: it may have landed
	rec := llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, KeyLimits: solo1k, WorkspaceLimits: solo1k,
		Estimate: 100, Actual: 5_000, Solo: true, Now: frozen(), ID: a.ID, Receipt: da.Receipt}
	require.Eventually(t, func() bool { // the limiter's retries: a few seconds
		_, _ = s.Admit(ctx, soloReq("sk-b", 1)) // Redis answers: the flusher starts again
		return s.Reconcile(ctx, rec) == nil
	}, 2*time.Second, 50*time.Millisecond, "the reconcile lands within the limiter's retries")
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.NoError(t, s.Close(cctx)) // the rest of the queue is not this test's
	probe := probeStore(t, redisrig.Client(t, srv.Addr), prefix)
	pd, err := probe.Admit(ctx, soloReq("sk-a", 0))
	require.NoError(t, err)
	assert.Equal(t, int64(20_000-5_000), pd.Remaining[llmrate.WorkspaceTokens], "Redis holds what the request consumed")
}

// TestFailingChargeDoesNotHoldOthers: one charge whose debit Redis keeps
// refusing (a per-key error) is tried first a few times, since its debit
// may have landed, then goes to the back: the other fallback admissions
// are charged (review reproducer: 0 of 20 after 200 answered calls, the
// bad one tried first every time).
func TestFailingChargeDoesNotHoldOthers(t *testing.T) {
	_, p, c := faultyRedis(t)
	s := chargeStore(t, c)
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-warm", 1))
	require.NoError(t, err)
	p.setDown(true)
	a := soloReq("sk-bad", 1)
	d, err := s.Admit(ctx, a)
	require.NoError(t, err)
	require.Equal(t, "local", d.Receipt)
	for range 20 {
		d, err := s.Admit(ctx, soloReq("sk-other", 1))
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
	}
	var fails atomic.Int64 // Redis refuses every charge of a (an error of its own: WRONGTYPE on its entry)
	c.AddHook(scriptHook(func(_ context.Context, cmd redis.Cmder) error {
		if isCharge(cmd, a.ID) {
			fails.Add(1)
			return wrongType{}
		}
		return nil
	}))
	p.setDown(false)
	for range 200 { // Redis answers 200 calls: each starts the flusher
		_, err := s.Admit(ctx, soloReq("sk-b", 1))
		require.NoError(t, err)
		s.WaitCharges()
	}
	sent, lost := s.Charges()
	t.Logf("after 200 answered calls: %d charges sent, %d lost, the bad one tried %d times, %d errors counted", sent, lost, fails.Load(), s.Errors())
	require.Equal(t, int64(20), sent, "the 20 other tenants' fallback admissions are charged to Redis")
	assert.Equal(t, int64(1), lost, "the refused one given up, counted")
	assert.Equal(t, int64(3), fails.Load(), "and tried three times, not once per answer from Redis")
}

// wrongType is an error Redis answers with (go-redis's redis.Error).
type wrongType struct{}

func (wrongType) Error() string {
	return "WRONGTYPE Operation against a key holding the wrong kind of value"
}
func (wrongType) RedisError() {}
