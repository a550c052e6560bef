package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
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
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// faultProxy forwards to a Redis server and injects faults on the way
// back: it drops the next replies (closing the client's connection after
// Redis has run the call), or holds every reply (a hung Redis), or refuses
// connections (a Redis that is down).
type faultProxy struct {
	addr   string
	target string
	drop   atomic.Int64 // replies still to drop
	hang   atomic.Bool  // hold replies (never forward them) while set
	down   atomic.Bool  // close new and live connections while set
	mu     sync.Mutex
	conns  []net.Conn
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{addr: l.Addr().String(), target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		p.closeAll()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				_ = c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(u, c); _ = u.Close() })
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 && !p.hang.Load() {
						if p.drop.Load() > 0 && p.drop.Add(-1) >= 0 {
							_ = u.Close() // Redis ran the call; its reply is lost
							return
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return p
}

// closeAll closes every connection through the proxy.
func (p *faultProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// setDown refuses connections (and closes the live ones) while down.
func (p *faultProxy) setDown(down bool) {
	p.down.Store(down)
	if down {
		p.closeAll()
	}
}

// faultyRedis starts a redis-server and a faultProxy in front of it, and
// returns them with docs/redis.md's client (redisrig.ContextClient)
// through the proxy.
func faultyRedis(t *testing.T) (*redistest.Server, *faultProxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := newFaultProxy(t, srv.Addr)
	return srv, p, redisrig.ContextClient(t, p.addr)
}

// frozen is the scripts' clock in the fault tests: nothing refills.
func frozen() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }

// probeStore is a store on c that reads the levels under prefix: on the
// frozen clock, each admission decided by Redis (no lease, no batch).
func probeStore(t *testing.T, c redis.UniversalClient, prefix string) *redisstore.Store {
	t.Helper()
	return redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1))
}

var solo1k = llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 10_000}

func soloReq(key string, tokens int64) llmrate.AdmitRequest {
	return llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: solo1k, WorkspaceLimits: solo1k, Tokens: tokens, Solo: true, Now: frozen(), ID: llmrate.NewAdmissionID()}
}

// modes are the store configurations every admission path runs in.
var modes = []struct {
	name string
	opts []redisstore.Option
}{
	{"plain", []redisstore.Option{redisstore.WithBatching(1)}},
	{"batched", []redisstore.Option{redisstore.WithBatching(16)}},
	{"leased", []redisstore.Option{redisstore.WithLeases(0.25)}},
}

// TestLostAdmissionReplyDebitsOnce: Redis runs an admission and its reply
// is lost (the connection drops). The admission is sent again, carrying
// its ID, and answered with its first decision: no error, and the bucket
// debited once, whether the store resends it (a client without retries) or
// go-redis does (its default MaxRetries 3), on every admission path.
func TestLostAdmissionReplyDebitsOnce(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range modes {
		for _, retries := range []int{-1, 0} { // 0: go-redis's default, 3
			t.Run(fmt.Sprintf("%s/maxretries=%d", m.name, retries), func(t *testing.T) {
				p := newFaultProxy(t, srv.Addr)
				c := redisrig.NewClient(t, &redis.Options{Addr: p.addr, MaxRetries: retries, ContextTimeoutEnabled: true})
				prefix := redisrig.Prefix()
				s := redisrig.Store(t, c, append(m.opts, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen))...)
				ctx := context.Background()
				first := soloReq("sk-lost", 100)
				d, err := s.Admit(ctx, first) // loads the script; not leased (not busy yet)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				p.drop.Store(1)
				r := soloReq("sk-lost", 100)
				d, err = s.Admit(ctx, r)
				require.NoError(t, err, "a lost reply within the timeout is no failure")
				require.True(t, d.Allowed)
				assert.Zero(t, p.drop.Load(), "the reply was dropped")
				assert.Zero(t, s.Errors())
				// A third admission through a store without leases sees the
				// bucket: 2×1000 requests less three, 2×10,000 tokens less
				// 300 (less the lease, which the leased store's Remaining
				// leaves out: its level plus what it holds is the same).
				probe := probeStore(t, c, prefix)
				d, err = probe.Admit(ctx, soloReq("sk-lost", 100))
				require.NoError(t, err)
				require.True(t, d.Allowed)
				lease := int64(0)
				if m.name == "leased" {
					lease = 500 // share 0.25 of 2,000 requests; the tokens bucket's 5,000
					assert.Equal(t, int64(20_000-300-5000), d.Remaining[llmrate.WorkspaceTokens], "debited once")
				} else {
					assert.Equal(t, int64(20_000-300), d.Remaining[llmrate.WorkspaceTokens], "debited once")
				}
				assert.Equal(t, int64(2000-3)-lease, d.Remaining[llmrate.WorkspaceRequests], "debited once")
			})
		}
	}
}

// TestReconcileAppliedOnce: a reconcile whose reply is lost after Redis
// applied it is sent again by go-redis (default MaxRetries 3), or by the
// caller after an error: applied once, by its ID, on the plain and the
// leased paths.
func TestReconcileAppliedOnce(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range []string{"plain", "leased"} {
		t.Run(m, func(t *testing.T) {
			p := newFaultProxy(t, srv.Addr)
			c := redisrig.NewClient(t, &redis.Options{Addr: p.addr, ContextTimeoutEnabled: true}) // MaxRetries: go-redis's default
			prefix := redisrig.Prefix()
			opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1)}
			if m == "leased" {
				opts = []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithLeases(0.25)}
			}
			s := redisrig.Store(t, c, opts...)
			ctx := context.Background()
			a := soloReq("sk-rec", 15_000)
			d, err := s.Admit(ctx, a)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			rr := llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, KeyLimits: a.KeyLimits, WorkspaceLimits: a.WorkspaceLimits,
				Estimate: 15_000, Actual: 12_000, Solo: true, Now: time.Now(), ID: a.ID, Receipt: d.Receipt}
			p.drop.Store(1)
			require.NoError(t, s.Reconcile(ctx, rr))
			assert.Zero(t, p.drop.Load(), "the reply was dropped")
			require.NoError(t, s.Reconcile(ctx, rr), "the caller resends it too")
			probe := probeStore(t, c, prefix)
			d, err = probe.Admit(ctx, soloReq("sk-rec", 1))
			require.NoError(t, err)
			assert.Equal(t, int64(20_000-15_000+3_000-1), d.Remaining[llmrate.WorkspaceTokens], "the 3,000 credited once")
		})
	}
}

// TestRefund: a refund gives the admission back in full, once, on the
// plain and leased paths.
func TestRefundOnce(t *testing.T) {
	_, c := redisrig.Start(t)
	for _, m := range []string{"plain", "leased"} {
		t.Run(m, func(t *testing.T) {
			prefix := redisrig.Prefix()
			opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1)}
			if m == "leased" {
				opts = []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithLeases(0.25)}
			}
			s := redisrig.Store(t, c, opts...)
			ctx := context.Background()
			kl := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
			a := llmrate.AdmitRequest{Key: "alice", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: solo1k, Tokens: 300, Now: time.Now(), ID: llmrate.NewAdmissionID()}
			d, err := s.Admit(ctx, a)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			rr := llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, KeyLimits: kl, WorkspaceLimits: solo1k,
				Estimate: 300, Actual: 1_000_000, Refund: true, Now: time.Now(), ID: a.ID, Receipt: d.Receipt}
			require.NoError(t, s.Reconcile(ctx, rr))
			require.NoError(t, s.Reconcile(ctx, rr), "sent again: applied once")
			probe := probeStore(t, c, prefix)
			a.Tokens, a.ID = 1, ""
			d, err = probe.Admit(ctx, a)
			require.NoError(t, err)
			assert.Equal(t, [4]int64{20 - 1, 2000 - 1, 2000 - 1, 20_000 - 1}, d.Remaining, "all four buckets full again before this admission")
		})
	}
}

// TestTimeoutWithAnyClient: against a Redis that never answers, with the
// old client of the README (now docs/redis.md) (no ContextTimeoutEnabled: go-redis would wait its 3 s
// read timeout), an admission returns by WithTimeout, counted as a Redis
// failure; through the limiter, requests fail open at the store timeout
// and goroutines do not pile up (the breaker stops calls after three
// failures; a guarded call's goroutine lasts until the client gives up).
func TestTimeoutWithAnyClient(t *testing.T) {
	srv := redistest.Start(t)
	p := newFaultProxy(t, srv.Addr)
	c := redisrig.NewClient(t, &redis.Options{Addr: p.addr, MaxRetries: -1})
	s := redisrig.Store(t, c, redisstore.WithTimeout(30*time.Millisecond), redisstore.WithRetryInterval(time.Hour))
	ctx := context.Background()
	// Connect and load the script through a store of the same client with
	// the default 1 s calls: under -race beside other packages, a dial and
	// a script load outlasted 30 ms (CI).
	_, err := redisrig.Store(t, c).Admit(ctx, soloReq("sk-h", 1))
	require.NoError(t, err)
	p.hang.Store(true)
	start := time.Now()
	_, err = s.Admit(ctx, soloReq("sk-h", 1))
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, time.Second, "held past WithTimeout (30 ms) towards the client's 3 s read timeout")
	assert.Equal(t, int64(1), s.Errors(), "a deadline passing is a Redis failure")

	before := runtime.NumGoroutine()
	l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithStoreTimeout(50*time.Millisecond))
	require.NoError(t, err)
	h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 100 {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer sk-h")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	assert.Equal(t, int64(100), l.FailOpens())
	assert.Less(t, runtime.NumGoroutine()-before, 10, "goroutines piled up")
	assert.Equal(t, int64(3), s.Errors(), "three failures open the breaker; no call is made while it is open (no probe within the hour)")
	p.hang.Store(false)
	p.closeAll() // the held calls end
	require.NoError(t, l.Close(ctx))
}

// TestCancellationNeverCounted: on every path (plain, batched, leased and
// reconcile), a call its caller cancels while Redis holds it is not a
// Redis failure; a deadline passing is.
func TestCancellationNeverCounted(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := newFaultProxy(t, srv.Addr)
			c := redisrig.ContextClient(t, p.addr)
			s := redisrig.Store(t, c, append(m.opts, redisstore.WithClock(frozen), redisstore.WithRetryInterval(time.Hour), redisstore.WithTimeout(200*time.Millisecond))...)
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			r := soloReq("sk-x", 1)
			for range 2 { // the second is busy: a lease renewal on the leased path
				_, err := s.Admit(context.Background(), soloReq("sk-x", 1))
				require.NoError(t, err)
			}
			rr := llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: solo1k, WorkspaceLimits: solo1k, Estimate: 1, Actual: 90_000, Solo: true, ID: r.ID}
			p.hang.Store(true)
			calls := map[string]func(ctx context.Context) error{
				"admit":     func(ctx context.Context) error { _, err := s.Admit(ctx, soloReq("sk-y", 1)); return err }, // not busy: to Redis
				"reconcile": func(ctx context.Context) error { return s.Reconcile(ctx, rr) },
			}
			for name, call := range calls {
				for range 4 {
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(20*time.Millisecond, cancel)
					assert.ErrorIs(t, call(ctx), context.Canceled, name)
					cancel()
				}
				assert.Zero(t, s.Errors(), "%s: a caller's cancellation counted as a Redis failure", name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			assert.Error(t, calls["reconcile"](ctx))
			assert.Equal(t, int64(1), s.Errors(), "a deadline passing is a Redis failure")
			p.hang.Store(false)
			p.closeAll()
		})
	}
}

// TestReconcileGoesToDecidingStore: with a local fallback, a reconcile goes
// where its admission was decided, whatever the breaker did since: the
// fallback's credit never reaches Redis as a credit (Redis is charged the
// fallback's admission with what it consumed, charges.go), and a Redis
// debit made while Redis is down fails (for the limiter to retry) rather
// than land in the fallback.
func TestReconcileGoesToDecidingStore(t *testing.T) {
	srv, p, c := faultyRedis(t)
	prefix := redisrig.Prefix()
	// 200 ms calls: a charge that times out under a loaded machine's
	// -race run stays queued past WaitCharges (CI saw -20000 for -20001).
	s := redisrig.Store(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1),
		redisstore.WithFallbackLocal(), redisstore.WithRetryInterval(0), redisstore.WithTimeout(200*time.Millisecond))
	probe := probeStore(t, redisrig.Client(t, srv.Addr), prefix)
	ctx := context.Background()
	redisLevel := func() int64 {
		t.Helper()
		d, err := probe.Admit(ctx, soloReq("sk-f", 0))
		require.NoError(t, err)
		return d.Remaining[llmrate.WorkspaceTokens]
	}
	inRedis := soloReq("sk-f", 15_000)
	d1, err := s.Admit(ctx, inRedis)
	require.NoError(t, err)
	require.True(t, d1.Allowed)
	p.setDown(true)
	local := soloReq("sk-f", 4_000)
	d2, err := s.Admit(ctx, local)
	require.NoError(t, err, "the fallback decides")
	require.True(t, d2.Allowed)
	assert.Equal(t, int64(20_000-15_000-4_000), d2.Remaining[llmrate.WorkspaceTokens],
		"the fallback's own buckets, from the level Redis last reported")
	assert.NotEqual(t, d1.Receipt, d2.Receipt)

	// The Redis admission's debit, while Redis is down: an error, not
	// the fallback.
	debit := llmrate.ReconcileRequest{Key: "sk-f", Workspace: "sk-f", KeyLimits: solo1k, WorkspaceLimits: solo1k, Estimate: 15_000, Actual: 40_000, Solo: true, ID: inRedis.ID, Receipt: d1.Receipt}
	require.Error(t, s.Reconcile(ctx, debit))
	d, err := s.Admit(ctx, soloReq("sk-f", 1))
	require.NoError(t, err)
	assert.Equal(t, int64(20_000-15_000-4_000-1), d.Remaining[llmrate.WorkspaceTokens], "the fallback untouched by Redis's debit")

	p.setDown(false)
	credit := llmrate.ReconcileRequest{Key: "sk-f", Workspace: "sk-f", KeyLimits: solo1k, WorkspaceLimits: solo1k, Estimate: 4_000, Actual: 0, Solo: true, ID: local.ID, Receipt: d2.Receipt}
	require.NoError(t, s.Reconcile(ctx, credit))
	assert.Equal(t, int64(20_000-15_000), redisLevel(), "Redis gained nothing from the fallback's credit")
	require.NoError(t, s.Reconcile(ctx, debit), "retried once Redis is back")
	s.WaitCharges() // Redis answered: the fallback's two admissions are charged
	assert.Equal(t, int64(20_000-40_000-0-1), redisLevel(),
		"Redis got its own debit, and the fallback's admissions as consumed: 0 tokens (credited to 0 before the charge) and 1")
}

// scriptCounter counts the scripts a client sends (EVALSHA or EVAL).
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBreakerProbesOneAtATime: three failures open the breaker; while it
// is open, admissions go to the fallback without a Redis call, but for one
// probe at a time once the retry interval has passed; the first probe that
// succeeds closes it.
func TestBreakerProbesOneAtATime(t *testing.T) {
	_, p, c := faultyRedis(t)
	calls := &scriptCounter{}
	c.AddHook(calls)
	// 1 s calls (a first hedge after 250 ms): with 300 ms calls, CI under
	// -race saw 13 scripts for the last 5 admissions, answers slower than
	// the 75 ms a first hedge waited.
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(time.Second), redisstore.WithRetryInterval(0))
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-b", 1))
	require.NoError(t, err)
	p.hang.Store(true)
	for range 3 {
		d, err := s.Admit(ctx, soloReq("sk-b", 1))
		require.NoError(t, err, "the fallback answers")
		require.True(t, d.Allowed)
	}
	require.Equal(t, int64(3), s.Errors())
	before := calls.n.Load()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			d, err := s.Admit(ctx, soloReq("sk-b", 1))
			assert.NoError(t, err)
			assert.True(t, d.Allowed)
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), calls.n.Load()-before, "one probe at a time while open")
	p.hang.Store(false)
	p.closeAll()
	require.Eventually(t, func() bool {
		d, err := s.Admit(ctx, soloReq("sk-b", 1))
		return err == nil && d.Receipt == ""
	}, 5*time.Second, 10*time.Millisecond, "a probe succeeds and closes the breaker")
	s.WaitCharges() // the fallback's admissions, charged to Redis (scripts too)
	before = calls.n.Load()
	for range 5 {
		_, err := s.Admit(ctx, soloReq("sk-b", 1))
		require.NoError(t, err)
	}
	assert.Equal(t, int64(5), calls.n.Load()-before, "closed: every admission goes to Redis")
}

// TestBreakerTransitionsLogged: a Redis stopped mid-run and started again
// makes one warn line as the breaker opens and one as it closes, however
// many calls fail or pass meanwhile, and StoreStats counts the outage: the
// errors, the one opening, the admissions the fallback decided, and their
// charges, pending while Redis is down and sent once it answers.
func TestBreakerTransitionsLogged(t *testing.T) {
	srv, c := redisrig.Start(t)
	core, logs := observer.New(zapcore.DebugLevel)
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
		redisstore.WithLogger(zap.New(core)), redisstore.WithRetryInterval(time.Millisecond))
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	ctx := context.Background()
	admit := func() llmrate.Decision {
		t.Helper()
		d, err := s.Admit(ctx, soloReq("sk-outage", 1))
		require.NoError(t, err, "Redis or the fallback answers")
		require.True(t, d.Allowed)
		return d
	}
	for range 5 {
		require.Empty(t, admit().Receipt, "Redis decides")
	}
	before := s.StoreStats()
	assert.Equal(t, llmrate.StoreCounters{}, before, "nothing failed yet")

	srv.Stop()
	require.Eventually(t, func() bool { admit(); return s.StoreStats().BreakerOpen }, 10*time.Second, time.Millisecond, "the breaker opens")
	for range 50 {
		admit() // open: the fallback decides, but for the probes
	}
	down := s.StoreStats()
	assert.Equal(t, int64(1), down.BreakerOpens)
	assert.GreaterOrEqual(t, down.Errors, int64(3), "three failures in a row open it")
	assert.GreaterOrEqual(t, down.Fallbacks, int64(50))
	assert.Equal(t, down.Fallbacks, down.ChargesPending, "each fallback admission awaits its charge")
	assert.Equal(t, 1, logs.FilterMessage("redisstore: breaker open").Len(), "one line for the opening")
	assert.Zero(t, logs.FilterMessage("redisstore: breaker closed").Len())

	srv.Restart(t)
	require.Eventually(t, func() bool { return admit().Receipt == "" }, 10*time.Second, time.Millisecond, "Redis decides again")
	for range 50 {
		require.Empty(t, admit().Receipt)
	}
	s.WaitCharges()
	up := s.StoreStats()
	assert.False(t, up.BreakerOpen)
	assert.Equal(t, int64(1), up.BreakerOpens, "it opened once")
	assert.Zero(t, up.ChargesPending)
	assert.Equal(t, up.Fallbacks, up.ChargesSent, "every fallback admission charged to Redis")
	assert.Zero(t, up.ChargesLost)

	opened, closed := logs.FilterMessage("redisstore: breaker open").All(), logs.FilterMessage("redisstore: breaker closed").All()
	require.Len(t, opened, 1, "one line for the opening")
	require.Len(t, closed, 1, "one line for the closing")
	assert.Equal(t, zapcore.WarnLevel, opened[0].Level)
	assert.Equal(t, zapcore.WarnLevel, closed[0].Level)
	assert.Equal(t, true, opened[0].ContextMap()["fallback"])
	assert.Contains(t, opened[0].ContextMap(), "error")
	assert.Equal(t, up.Fallbacks, closed[0].ContextMap()["fallbacks"])
	// Beside New's one warning about the client (redisrig's has no
	// ContextTimeoutEnabled): no line per call.
	assert.Equal(t, 2, logs.Len()-logs.FilterMessageSnippet("lacks ContextTimeoutEnabled").Len(), "nothing else logged: no line per call")
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			assert.NotContains(t, fmt.Sprint(v), "sk-outage", "field %s", k)
		}
	}
}

// holdReplyHook, once armed, holds the reply of the next command (after
// Redis ran it) until release is closed, and closes held when it holds one.
type holdReplyHook struct {
	armed         atomic.Bool
	held, release chan struct{}
	// every: while armed, every call is held (not only the first).
	every    bool
	heldOnce sync.Once
	// untilDeadline: the held reply is given up at the call's deadline, as
	// a read on a client with ContextTimeoutEnabled is (a timeout).
	untilDeadline bool
}

func newHoldReplyHook() *holdReplyHook {
	return &holdReplyHook{held: make(chan struct{}), release: make(chan struct{})}
}
func (h *holdReplyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.every && h.armed.Load() || h.armed.CompareAndSwap(true, false) {
			h.heldOnce.Do(func() { close(h.held) })
			dl, ok := ctx.Deadline()
			if !h.untilDeadline || !ok {
				<-h.release
				return err
			}
			t := time.NewTimer(time.Until(dl))
			defer t.Stop()
			select {
			case <-h.release:
			case <-t.C:
				return os.ErrDeadlineExceeded
			}
		}
		return err
	}
}
func (h *holdReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLeaseWaiterGetsFallback: an admission waiting for its workspace's
// lease renewal, whose deadline passes while Redis is slow (for every
// call: the renewal's and its own), gets the local fallback's decision,
// not an error.
func TestLeaseWaiterGetsFallback(t *testing.T) {
	_, c := redisrig.Start(t)
	hook := newHoldReplyHook()
	hook.every = true
	c.AddHook(hook)
	s := redisrig.Stores(t, c, 1, redisstore.WithLeases(0.25), redisstore.WithClock(frozen), redisstore.WithFallbackLocal())[0]
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-w", 1))
	require.NoError(t, err)
	hook.armed.Store(true)
	renewed := make(chan error, 1)
	go func() { _, err := s.Admit(ctx, soloReq("sk-w", 1)); renewed <- err }() // busy: a renewal
	<-hook.held
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	d, err := s.Admit(wctx, soloReq("sk-w", 1))
	hook.armed.Store(false)
	close(hook.release)
	require.NoError(t, err, "the fallback decides a waiter whose deadline passed")
	assert.True(t, d.Allowed)
	assert.NotEmpty(t, d.Receipt, "decided by the fallback")
	require.NoError(t, <-renewed)
}

// TestLeaseWaiterDecidedByRedisWhenRenewalSlow: an admission waiting for a
// lease renewal whose reply is held waits at most a hedge delay, then is
// decided on Redis by a call of its own, not by the fallback at its
// deadline (under faults the fallback is what admits beyond exact).
func TestLeaseWaiterDecidedByRedisWhenRenewalSlow(t *testing.T) {
	_, c := redisrig.Start(t)
	hook := newHoldReplyHook()
	c.AddHook(hook)
	s := redisrig.Stores(t, c, 1, redisstore.WithLeases(0.25), redisstore.WithClock(frozen), redisstore.WithFallbackLocal())[0]
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-w", 1))
	require.NoError(t, err)
	hook.armed.Store(true)
	renewed := make(chan error, 1)
	go func() { _, err := s.Admit(ctx, soloReq("sk-w", 1)); renewed <- err }() // busy: a renewal
	<-hook.held
	// The renewal is hedged a quarter of WithTimeout (1 s) after it was
	// sent, past the waiter's deadline: waiting for it, the waiter would
	// go to the fallback.
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	d, err := s.Admit(wctx, soloReq("sk-w", 1))
	close(hook.release)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Empty(t, d.Receipt, "decided by Redis, not the fallback")
	require.NoError(t, <-renewed)
}

// leaseLevels returns the Redis tokens level of a solo key's entry and the
// number of lease records out on it.
func leaseLevels(t *testing.T, c *redis.Client, prefix, key string) (tokens int64, records int64) {
	t.Helper()
	probe := probeStore(t, c, prefix)
	d, err := probe.Admit(context.Background(), soloReq(key, 0))
	require.NoError(t, err)
	_, w := probe.Keys(key, key)
	return d.Remaining[llmrate.WorkspaceTokens], c.HLen(context.Background(), w+":l").Val()
}

// TestLateLeaseReturnKeepsNewerLease: a reconcile that returns the
// process's lease is held on the wire while the same process renews and is
// granted a new lease; when it lands, it returns the old lease only: the
// new one stays out in Redis, where it was once deleted (and its capacity
// credited back while the process kept spending it).
func TestLateLeaseReturnKeepsNewerLease(t *testing.T) {
	_, c := redisrig.Start(t)
	hook := &blockHook{held: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(hook)
	prefix := redisrig.Prefix()
	s := redisrig.Stores(t, c, 1, redisstore.WithLeases(0.25), redisstore.WithPrefix(prefix), redisstore.WithClock(frozen))[0]
	ctx := context.Background()
	a1 := soloReq("sk-l", 100)
	for range 2 { // the second takes a lease of 5,000 tokens
		d, err := s.Admit(ctx, soloReq("sk-l", 100))
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// A credit the lease cannot absorb (nothing of it used yet): the lease
	// goes back with it.
	credit := llmrate.ReconcileRequest{Key: a1.Key, Workspace: a1.Workspace, KeyLimits: solo1k, WorkspaceLimits: solo1k, Estimate: 100, Actual: 0, Solo: true, ID: a1.ID}
	hook.armed.Store(true)
	reconciled := make(chan error, 1)
	go func() { reconciled <- s.Reconcile(ctx, credit) }()
	<-hook.held
	d, err := s.Admit(ctx, soloReq("sk-l", 100)) // no lease left: renews
	require.NoError(t, err)
	require.True(t, d.Allowed)
	close(hook.release)
	require.NoError(t, <-reconciled)
	tokens, records := leaseLevels(t, c, prefix, "sk-l")
	assert.Equal(t, int64(1), records, "the newer lease's record is still out")
	assert.Equal(t, int64(20_000-300+100-5_000), tokens, "three admissions, the credit, and the new lease out")
}

// TestReconcileDuringRenewal: a reconcile that leaves the bucket in debt
// while this process's renewal is in flight (granted before the debt, its
// reply not yet back) stops this process's lease admissions at once: the
// renewal's lease is not used.
func TestReconcileDuringRenewal(t *testing.T) {
	_, c := redisrig.Start(t)
	hook := newHoldReplyHook()
	c.AddHook(hook)
	s := redisrig.Stores(t, c, 1, redisstore.WithLeases(0.25), redisstore.WithClock(frozen))[0]
	ctx := context.Background()
	a1 := soloReq("sk-d", 100)
	_, err := s.Admit(ctx, a1)
	require.NoError(t, err)
	hook.armed.Store(true)
	renewed := make(chan llmrate.Decision, 1)
	go func() { d, err := s.Admit(ctx, soloReq("sk-d", 100)); assert.NoError(t, err); renewed <- d }()
	<-hook.held // granted in Redis, reply held
	debt := llmrate.ReconcileRequest{Key: a1.Key, Workspace: a1.Workspace, KeyLimits: solo1k, WorkspaceLimits: solo1k, Estimate: 100, Actual: 40_000, Solo: true, ID: a1.ID}
	done := make(chan error, 1)
	go func() { done <- s.Reconcile(ctx, debt) }()
	time.Sleep(20 * time.Millisecond) // let the reconcile reach Redis (it does not wait for the renewal)
	close(hook.release)
	require.True(t, (<-renewed).Allowed, "decided before the debt")
	require.NoError(t, <-done)
	admitted := 0
	for range 60 {
		if d, err := s.Admit(ctx, soloReq("sk-d", 100)); err == nil && d.Allowed {
			admitted++
		}
	}
	assert.Zero(t, admitted, "admitted after the debt on a lease granted before it")
}

// TestLeasesDebtStopsEveryProcess: three processes hold leases; one
// reconciles a debt of twice the capacity. It admits nothing more at once;
// each other admits at most its lease's unused part (share × capacity),
// and only until its lease's use window (leaseUse, 100 ms) ends: then it
// goes to Redis and sees the debt.
func TestLeasesDebtStopsEveryProcess(t *testing.T) {
	_, c := redisrig.Start(t)
	ctx := context.Background()
	clk := llmratetest.NewClock()
	ss := redisrig.Stores(t, c, 3, redisstore.WithLeases(0.25), redisstore.WithClock(clk.Now))
	req := func() llmrate.AdmitRequest {
		r := soloReq("sk-e", 100)
		r.Now = clk.Now()
		return r
	}
	var first llmrate.AdmitRequest
	for i, s := range ss {
		for j := range 2 { // the second takes a lease
			r := req()
			if i == 0 && j == 0 {
				first = r
			}
			d, err := s.Admit(ctx, r)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	debt := llmrate.ReconcileRequest{Key: first.Key, Workspace: first.Workspace, KeyLimits: solo1k, WorkspaceLimits: solo1k, Estimate: 100, Actual: 1_000_000, Solo: true, ID: first.ID}
	require.NoError(t, ss[0].Reconcile(ctx, debt))
	d, err := ss[0].Admit(ctx, req())
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the reconciling process stops at once")
	// Process 1 spends part of its lease within the window.
	for range 10 {
		d, err := ss[1].Admit(ctx, req())
		require.NoError(t, err)
		assert.True(t, d.Allowed, "within the window, on its lease")
	}
	clk.Advance(100 * time.Millisecond) // leaseUse
	for _, s := range ss[1:] {
		d, err := s.Admit(ctx, req())
		require.NoError(t, err)
		assert.False(t, d.Allowed, "past the window every process sees the debt")
	}
}

// TestLeasesDebtWindowMeasured measures what the lease bound promises on
// Redis's own clock: three processes with leases, nine goroutines admitting
// one key (one token each, capacity 200,000 requests and tokens), and one reconcile,
// through process 0, that leaves the bucket deep in debt (it stays there
// for minutes). Every token admitted by an admission that started after
// that reconcile returned is beyond the exact limit. Process 0 admits none;
// the others, together, at most (N − 1) × share × capacity; the window
// (until the last such admission) is logged. docs/redis.md (Leases) quotes the figures.
func TestLeasesDebtWindowMeasured(t *testing.T) {
	_, c := redisrig.Start(t)
	lim := llmrate.Limits{RequestsPerMinute: 100_000, TokensPerMinute: 100_000} // capacity 200,000 of each
	const capacity, n = 200_000, 3
	for _, share := range []float64{0.1, 0.25} {
		t.Run(strconv.FormatFloat(share, 'f', -1, 64), func(t *testing.T) {
			ss := redisrig.Stores(t, c, n, redisstore.WithLeases(share))
			ctx := context.Background()
			req := func() llmrate.AdmitRequest {
				return llmrate.AdmitRequest{Key: "sk-m", Workspace: "sk-m", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true, Now: time.Now(), ID: llmrate.NewAdmissionID()}
			}
			var debtAt atomic.Int64 // unix ns the reconcile returned; 0 before
			var over [n]atomic.Int64
			var last atomic.Int64 // latest start of an admission allowed after the debt
			var before atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 3 * n {
				s := ss[g%n]
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						start := time.Now().UnixNano()
						d, err := s.Admit(ctx, req())
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed && debtAt.Load() == 0 {
							before.Add(1)
						}
						if at := debtAt.Load(); d.Allowed && at != 0 && start > at {
							over[g%n].Add(1)
							if start > last.Load() {
								last.Store(start)
							}
						}
					}
				})
			}
			time.Sleep(100 * time.Millisecond) // the processes take leases
			r := req()
			require.NoError(t, ss[0].Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: lim,
				Estimate: 100, Actual: 1 << 40, Solo: true, ID: r.ID}))
			debtAt.Store(time.Now().UnixNano())
			time.Sleep(500 * time.Millisecond)
			close(stop)
			wg.Wait()
			total := over[1].Load() + over[2].Load()
			window := time.Duration(0)
			if l := last.Load(); l != 0 {
				window = time.Duration(l - debtAt.Load())
			}
			t.Logf("share %v: %d admitted before the debt, %d on leases in all", share, before.Load(), ss[0].Leased()+ss[1].Leased()+ss[2].Leased())
			t.Logf("share %v: beyond exact after the debt: process 0 %d tokens, others %d tokens (%.3f × capacity; bound (N−1)×share = %.2f), last at +%v",
				share, over[0].Load(), total, float64(total)/capacity, float64(n-1)*share, window)
			assert.Zero(t, over[0].Load(), "the reconciling process admitted after its debt")
			assert.LessOrEqual(t, float64(total), float64(n-1)*share*capacity, "beyond (N−1) × share × capacity")
		})
	}
}

// TestFallbackContinuesFromRedisLevels: once Redis has emptied a key's
// bucket, a call that cannot reach Redis is refused by the local fallback
// too: the fallback decides from the levels Redis last reported (refilled
// since), not from a full bucket. Before, every such call was an
// admission beyond exact. A key Redis never decided for still starts full
// in the fallback. Every admission path: plain, batched, leased, gauged,
// windowed, with a priority reserve.
func TestFallbackContinuesFromRedisLevels(t *testing.T) {
	three := llmrate.Limits{RequestsPerMinute: 3, TokensPerMinute: 1_000} // 6 requests' capacity
	gauged := three
	gauged.ConcurrentRequests = 100
	windowed := withWindows(three, llmrate.Window{Per: 24 * time.Hour, Requests: 1_000})
	ws := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 100_000}
	paths := []struct {
		name    string
		opts    []redisstore.Option
		lim     llmrate.Limits
		reserve int64
		fits    int // the requests Redis admits of the bucket's 6
	}{
		{"plain", []redisstore.Option{redisstore.WithBatching(1)}, three, 0, 6},
		{"batched", []redisstore.Option{redisstore.WithBatching(16)}, three, 0, 6},
		{"leased", []redisstore.Option{redisstore.WithLeases(0.25)}, three, 0, 6},
		{"gauged", []redisstore.Option{redisstore.WithBatching(1)}, gauged, 0, 6},
		{"windowed", []redisstore.Option{redisstore.WithBatching(1)}, windowed, 0, 6},
		{"reserved", []redisstore.Option{redisstore.WithBatching(1)}, three, 1, 5}, // ⌈6 × 1/1,000,000⌉ = 1 kept
	}
	for _, pt := range paths {
		t.Run(pt.name, func(t *testing.T) {
			_, p, c := faultyRedis(t)
			opts := append([]redisstore.Option{redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
				redisstore.WithTimeout(200 * time.Millisecond)}, pt.opts...)
			s := redisrig.Store(t, c, opts...)
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			ctx := context.Background()
			req := func(key string) llmrate.AdmitRequest {
				return llmrate.AdmitRequest{Key: key, Workspace: "acme", KeyLimits: pt.lim, WorkspaceLimits: ws,
					Tokens: 10, Reserve: pt.reserve, Now: frozen(), ID: llmrate.NewAdmissionID()}
			}
			allowed := 0
			for range 10 { // the clock is frozen: pt.fits fit, then Redis refuses
				d, err := s.Admit(ctx, req("sk-a"))
				require.NoError(t, err)
				require.NotEqual(t, "local", d.Receipt, "Redis is up")
				if d.Allowed {
					allowed++
				}
			}
			require.Equal(t, pt.fits, allowed, "Redis admits the key's capacity")

			p.down.Store(true) // Redis unreachable from here on
			p.closeAll()
			d, err := s.Admit(ctx, req("sk-a"))
			require.NoError(t, err, "the fallback answers")
			require.Equal(t, "local", d.Receipt, "decided by the fallback")
			assert.False(t, d.Allowed, "the fallback starts from Redis's empty bucket, not a full one")
			assert.Equal(t, llmrate.KeyRequests, d.Refused)

			d, err = s.Admit(ctx, req("sk-new"))
			require.NoError(t, err)
			require.Equal(t, "local", d.Receipt)
			assert.True(t, d.Allowed, "a key Redis never decided for starts full in the fallback")
		})
	}
}

// TestFallbackFollowsLevelBesideLease: a lease renewal's levels are
// Redis's before the lease it grants, and the process spends the lease
// without Redis: the fallback follows what Redis holds beside the lease,
// so that, Redis gone, the process admits no more than the key's capacity
// (a frozen minute: nothing refills).
func TestFallbackFollowsLevelBesideLease(t *testing.T) {
	kl := llmrate.Limits{RequestsPerMinute: 40, TokensPerMinute: 4_000} // 80 requests
	ws := llmrate.Limits{RequestsPerMinute: 10_000, TokensPerMinute: 1_000_000}
	_, p, c := faultyRedis(t)
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(200*time.Millisecond), redisstore.WithLeases(0.25))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	req := func() llmrate.AdmitRequest {
		return llmrate.AdmitRequest{Key: "sk-l", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: ws,
			Tokens: 10, Now: frozen(), ID: llmrate.NewAdmissionID()}
	}
	for range 22 { // one decided by Redis, one renewal granting a lease of 20, 20 on the lease
		d, err := s.Admit(ctx, req())
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.Equal(t, 20, s.Leased())
	p.setDown(true)
	fb := 0
	for range 100 {
		d, err := s.Admit(ctx, req())
		require.NoError(t, err)
		require.Equal(t, "local", d.Receipt)
		if d.Allowed {
			fb++
		}
	}
	assert.Equal(t, 80-22, fb, "the fallback admits what Redis still held, not the lease again")
}

// TestClientWithoutContextTimeoutWarned: a store on a client without
// ContextTimeoutEnabled says so once, at New, through its logger: on such
// a client a reply lost on a connection that stays open holds that
// connection for go-redis's ReadTimeout (3 s by default), and at 2% of
// replies silenced the pool runs dry (cmd/llmrate-spill -scenarios silent
// -ctx-timeout=false -fallback=false: 1,983 of 6,468 requests failed
// open). A client with it is not warned about.
func TestClientWithoutContextTimeoutWarned(t *testing.T) {
	srv := redistest.Start(t)
	for _, cte := range []bool{false, true} {
		core, logs := observer.New(zapcore.DebugLevel)
		c := redisrig.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: cte})
		redisrig.Store(t, c, redisstore.WithLogger(zap.New(core)))
		warned := logs.FilterMessageSnippet("ContextTimeoutEnabled").FilterLevelExact(zapcore.WarnLevel).Len()
		if cte {
			assert.Zero(t, warned, "a client with ContextTimeoutEnabled")
		} else {
			assert.Equal(t, 1, warned, "a client without ContextTimeoutEnabled: one warning, at New")
		}
	}
}
