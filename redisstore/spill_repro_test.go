package redisstore_test

// The tests in this file reproduce what the spillover benchmark
// (cmd/llmrate-spill, RELIABILITY.md §7) measured against the goals of
// docs/redis.md "Under faults" on the code of commit
// f23482d, and failed there. Two are fixed and run as regression tests;
// TestSpillBreakerFailOpensPerError is a known miss, run only with
// LLMRATE_SPILL_REPRO=1 (RELIABILITY.md §7 says why).

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spillRepro skips t unless LLMRATE_SPILL_REPRO=1 (see the file's top).
func spillRepro(t *testing.T) {
	t.Helper()
	if os.Getenv("LLMRATE_SPILL_REPRO") != "1" {
		t.Skip("a known failure reproduced from the spillover benchmark; LLMRATE_SPILL_REPRO=1 runs it")
	}
}

// errLog is a go-redis hook that keeps the first errors of the store's
// script calls, to say what failed.
type errLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *errLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *errLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (l *errLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
			l.mu.Lock()
			if len(l.errs) < 20 {
				l.errs = append(l.errs, fmt.Sprintf("%s: %T %v", cmd.Name(), err, err))
			}
			l.mu.Unlock()
		}
		return err
	}
}

// TestSpillDropsWithinTimeout reproduces the spillover benchmark's "drop"
// scenario (RELIABILITY.md §7) on the plain and batched paths: concurrent
// admissions and reconciles, each with its identity, through a proxy that
// loses a fraction of replies after Redis ran the call (closing the
// connection), on docs/redis.md's client (MaxRetries −1,
// ContextTimeoutEnabled), with a timeout far above Redis's latency.
// A lost reply is sent again within WithTimeout and costs
// nothing, so no call may fail (a failure sends the admission to the
// fallback, which admits beyond exact). The benchmark's 2% loses a call
// now and then (1–8 Redis errors in 500 drops); 20% here makes it
// certain: before c9d2ac5 a call failed once three tries in a row lost
// their replies, long before its deadline (the store stopped after 2
// resends whatever time was left; a resend on a new connection also risks
// its handshake's replies, HELLO and CLIENT); now it resends up to
// maxResends (32) times while WithTimeout allows.
func TestSpillDropsWithinTimeout(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range modes[:2] { // plain, batched
		t.Run(m.name, func(t *testing.T) {
			p := redisrig.Proxy(t, srv.Addr, 7)
			c := redisrig.ContextClient(t, p.Addr())
			log := &errLog{}
			c.AddHook(log)
			// A timeout far above a stall of this machine under -race and
			// parallel packages (CI saw calls pass 250 ms), so that only
			// lost replies, never slowness, can fail a call.
			s := redisrig.Store(t, c, append(m.opts, redisstore.WithTimeout(3*time.Second), redisstore.WithClock(frozen))...)
			big := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 100_000_000}
			ctx := context.Background()
			// Warm the pool and the scripts without faults.
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					_, _ = s.Admit(ctx, llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: big, WorkspaceLimits: big, Tokens: 1, Solo: true, Now: frozen(), ID: llmrate.NewAdmissionID()})
				})
			}
			wg.Wait()
			require.Zero(t, s.Errors())
			require.NoError(t, p.Set(faultproxy.Faults{DropReply: 0.2}))
			var mu sync.Mutex
			var failed []string
			for g := range 8 {
				wg.Go(func() {
					for i := range 150 {
						id := llmrate.NewAdmissionID()
						ar := llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: big, WorkspaceLimits: big, Tokens: 100, Solo: true, Now: frozen(), ID: id}
						cctx, cancel := context.WithTimeout(ctx, 6*time.Second)
						start := time.Now()
						d, err := s.Admit(cctx, ar)
						if err == nil {
							err = s.Reconcile(cctx, llmrate.ReconcileRequest{Key: "k", Workspace: "k", KeyLimits: big, WorkspaceLimits: big,
								Estimate: 100, Actual: 50, Solo: true, Now: frozen(), ID: id, Receipt: d.Receipt})
						}
						cancel()
						if err != nil {
							mu.Lock()
							failed = append(failed, fmt.Sprintf("client %d call %d after %v: %v", g, i, time.Since(start).Round(time.Millisecond), err))
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			st := p.Stats()
			t.Logf("%d replies dropped, %d resends, %d Redis errors; first call errors seen by go-redis: %q", st.Dropped, s.Resends(), s.Errors(), log.errs)
			require.Positive(t, st.Dropped)
			assert.Zero(t, s.Errors(), "lost replies within the timeout are no Redis failures")
			if len(failed) > 5 {
				failed = append(failed[:5], fmt.Sprintf("and %d more", len(failed)-5))
			}
			assert.Empty(t, failed, "no admission or reconcile fails")
		})
	}
}

// TestSpillBreakerFailOpensPerError reproduces the spillover benchmark's
// "spike" scenario without a fallback (bench/spill-2026-12-01b-nofallback.txt:
// 464 Redis errors, 2,914 fail-opens, plain): once three calls in a row
// have failed, every admission until the next probe (the retry interval,
// 100 ms, and the probe's own time) returns an error at once, and the
// limiter fails it open, however few Redis errors there were. The goal
// (RELIABILITY.md §7) is fail-opens ≤ 3 × store errors; here three errors are followed by
// 30 admissions that all fail, at a request rate any busy gateway exceeds
// (30 in well under 100 ms).
func TestSpillBreakerFailOpensPerError(t *testing.T) {
	spillRepro(t)
	_, p, c := faultyRedis(t)
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithTimeout(50*time.Millisecond))
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-fo", 1))
	require.NoError(t, err)
	p.hang.Store(true) // Redis stops answering for a while (a long spike)
	failOpens := 0
	for range 3 {
		_, err := s.Admit(ctx, soloReq("sk-fo", 1))
		require.Error(t, err)
		failOpens++
	}
	require.Equal(t, int64(3), s.Errors())
	for range 30 {
		if _, err := s.Admit(ctx, soloReq("sk-fo", 1)); err != nil {
			failOpens++ // the limiter passes the request, unlimited
		}
	}
	assert.LessOrEqual(t, failOpens, 3*int(s.Errors()), "admissions failed open (every error Admit returned) ≤ 3 × Redis errors (%d)", s.Errors())
}

// TestSpillBreakerBypassesLease: with leases, an open breaker sends every
// admission to the local fallback, those this process's lease covers
// included: the lease was debited in Redis up front and needs no Redis
// call, yet the fallback's own full bucket decides, beyond exact (counted
// as a fallback decision), while the lease's capacity sits unused until it
// is returned. In the benchmark's default-timeout run the leased rows show
// far more fallback admissions than Redis errors (drop: 104 for 6 errors;
// reset: 326 for 21; bench/spill-2026-12-01b.txt); this is one path that
// does it (lease waiters whose deadline passes are the other).
func TestSpillBreakerBypassesLease(t *testing.T) {
	_, p, c := faultyRedis(t)
	calls := &scriptCounter{}
	c.AddHook(calls)
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithLeases(0.25), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(50*time.Millisecond))
	ctx := context.Background()
	for range 2 { // the second call finds the key busy and takes a lease
		d, err := s.Admit(ctx, soloReq("sk-hot", 1))
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	before := calls.n.Load()
	d, err := s.Admit(ctx, soloReq("sk-hot", 1))
	require.NoError(t, err)
	require.Equal(t, before, calls.n.Load(), "decided on the lease, without Redis")
	require.Empty(t, d.Receipt)

	p.hang.Store(true)
	for range 3 { // another key's calls fail: the breaker opens
		d, err := s.Admit(ctx, soloReq("sk-other", 1))
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
	}
	require.Equal(t, int64(3), s.Errors())
	d, err = s.Admit(ctx, soloReq("sk-hot", 1))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Empty(t, d.Receipt, "the lease, debited in Redis already, decides; not the fallback's own bucket")
}
