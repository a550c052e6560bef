package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// frozen is the scripts' clock in the fault tests: nothing refills.
func frozen() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }

func uniquePrefix() string { return "f" + strconv.FormatInt(prefixes.Add(1), 10) }

var solo1k = llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 10_000}

func soloReq(key string, tokens int64) llmrate.AdmitRequest {
	return llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: solo1k, WorkspaceLimits: solo1k, Tokens: tokens, Solo: true, Now: time.Now(), ID: llmrate.NewAdmissionID()}
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
				c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: retries, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				prefix := uniquePrefix()
				s := newStore(t, c, append(m.opts, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen))...)
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
				probe := newStore(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1))
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
			c := redis.NewClient(&redis.Options{Addr: p.addr, ContextTimeoutEnabled: true}) // MaxRetries: go-redis's default
			t.Cleanup(func() { _ = c.Close() })
			prefix := uniquePrefix()
			opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1)}
			if m == "leased" {
				opts = []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithLeases(0.25)}
			}
			s := newStore(t, c, opts...)
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
			probe := newStore(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1))
			d, err = probe.Admit(ctx, soloReq("sk-rec", 1))
			require.NoError(t, err)
			assert.Equal(t, int64(20_000-15_000+3_000-1), d.Remaining[llmrate.WorkspaceTokens], "the 3,000 credited once")
		})
	}
}

// TestRefund: a refund gives the admission back in full, once, on the
// plain and leased paths.
func TestRefundOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.Addr)
	for _, m := range []string{"plain", "leased"} {
		t.Run(m, func(t *testing.T) {
			prefix := uniquePrefix()
			opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1)}
			if m == "leased" {
				opts = []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithLeases(0.25)}
			}
			s := newStore(t, c, opts...)
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
			probe := newStore(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(frozen), redisstore.WithBatching(1))
			a.Tokens, a.ID = 1, ""
			d, err = probe.Admit(ctx, a)
			require.NoError(t, err)
			assert.Equal(t, [4]int64{20 - 1, 2000 - 1, 2000 - 1, 20_000 - 1}, d.Remaining, "all four buckets full again before this admission")
		})
	}
}

// TestTimeoutWithAnyClient: against a Redis that never answers, with the
// README's old client (no ContextTimeoutEnabled: go-redis would wait its 3 s
// read timeout), an admission returns by WithTimeout, counted as a Redis
// failure; through the limiter, requests fail open at the store timeout
// and goroutines do not pile up (the breaker stops calls after three
// failures; a guarded call's goroutine lasts until the client gives up).
func TestTimeoutWithAnyClient(t *testing.T) {
	srv := redistest.Start(t)
	p := newFaultProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, redisstore.WithTimeout(30*time.Millisecond), redisstore.WithRetryInterval(time.Hour))
	ctx := context.Background()
	_, err := s.Admit(ctx, soloReq("sk-h", 1)) // connect and load the script
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
