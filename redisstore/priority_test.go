package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prioSecret is the name-hash secret of every store here, the child
// processes' included (one secret: one set of entries).
var prioSecret = []byte("priority-test-secret-0123456789")

var prioPrefixes atomic.Int64

// prioStore is a store on addr under prefix (a new one when ""), its
// clock stopped at clk (no refill), closed when the test ends; its
// timeout generous (a loaded machine must not turn a slow call into an
// error, which would fail the test rather than show a wrong decision).
func prioStore(t *testing.T, addr, prefix string, clk time.Time, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	if prefix == "" {
		prefix = "prio" + strconv.FormatInt(prioPrefixes.Add(1), 10)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithTimeout(5 * time.Second),
		redisstore.WithHashKey(prioSecret), redisstore.WithClock(func() time.Time { return clk })}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close(context.Background())) })
	return s
}

var prioClock = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// scriptCalls is how many scripts the server has run.
func scriptCalls(t *testing.T, addr string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" || !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// TestReserveGaugesKeepSlotsFree: a key gauge of 4 and a workspace gauge
// of 3 with a reserve of one half keep ⌈0.5 × 4⌉ = 2 and ⌈0.5 × 3⌉ = 2
// slots free after the class takes its own: the class gets 1 slot of the
// workspace's (1 + 2 ≤ 3; a second would leave 1), refused by the
// workspace's gauge with ByReserve and Retry-After 1 s, and traffic
// without a reserve takes the other 2; then the gauge refuses everyone,
// without ByReserve (and the class by the key's gauge first, whose one
// free slot is not above its floor).
func TestReserveGaugesKeepSlotsFree(t *testing.T) {
	srv := redistest.Start(t)
	s := prioStore(t, srv.Addr, "", prioClock)
	ctx := context.Background()
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1_000_000}
	kl, wl := lim, lim
	kl.ConcurrentRequests, wl.ConcurrentRequests = 4, 3
	key := "sk-g"
	admit := func(reserve int64) llmrate.Decision {
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: "acme-g", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 10,
			ID: llmrate.NewAdmissionID(), Reserve: reserve})
		require.NoError(t, err)
		return d
	}
	require.True(t, admit(500_000).Allowed)
	d := admit(500_000)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.WorkspaceConcurrent, d.Refused)
	assert.True(t, d.ByReserve)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.False(t, d.NeverFits)
	require.True(t, admit(0).Allowed)
	require.True(t, admit(0).Allowed)
	d = admit(0)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.WorkspaceConcurrent, d.Refused)
	assert.False(t, d.ByReserve, "no slot free: refused without a reserve")
	assert.Equal(t, time.Second, d.RetryAfter)
	d = admit(500_000)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyConcurrent, d.Refused, "the key's gauge, checked first, has 1 slot free of 4: not above its floor of 2")
	assert.True(t, d.ByReserve)

	// Another key's gauge of 4 (the workspace's off): the class takes 2,
	// the key's gauge refuses the third, then traffic without a reserve
	// takes the other 2.
	key, kl.ConcurrentRequests, wl.ConcurrentRequests = "sk-g2", 4, 0
	require.True(t, admit(500_000).Allowed)
	require.True(t, admit(500_000).Allowed)
	d = admit(500_000)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyConcurrent, d.Refused)
	assert.True(t, d.ByReserve)
	assert.Equal(t, time.Second, d.RetryAfter)
	require.True(t, admit(0).Allowed)
	require.True(t, admit(0).Allowed)
	d = admit(0)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyConcurrent, d.Refused)
	assert.False(t, d.ByReserve)
}

// TestReserveMaxWaitRefusesBelowTheFloor: 60 requests a minute (a bucket
// of 120, one back a second) with a reserve of one half (floor 60): the
// class spends 60 at once; with MaxWait the next is refused, not granted
// a reservation (it would be debited now, below the floor), Retry-After
// the 1 s until the bucket holds 61, ByReserve, nothing debited. A
// request without a reserve still fits at once (59 left), and then the
// reserved class is refused for the 2 s until 61; the unclassed requests
// spend the bucket to 0 and the next of them waits 1 s, as without
// reserves. (This test once asserted a reservation left 59 under the
// floor of 60.)
func TestReserveMaxWaitRefusesBelowTheFloor(t *testing.T) {
	srv := redistest.Start(t)
	s := prioStore(t, srv.Addr, "", prioClock)
	ctx := context.Background()
	lim := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 1_000_000}
	admit := func(reserve int64, wait time.Duration) llmrate.Decision {
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-w", Workspace: "sk-w", Solo: true, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1,
			ID: llmrate.NewAdmissionID(), Reserve: reserve, MaxWait: wait})
		require.NoError(t, err)
		return d
	}
	for i := range 60 {
		d := admit(500_000, 0)
		require.True(t, d.Allowed, "%d", i)
		require.Zero(t, d.Wait)
	}
	d := admit(500_000, 5*time.Second)
	assert.False(t, d.Allowed, "a reservation would be debited below the floor")
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.True(t, d.ByReserve, "60 left: room for one, not above the floor")
	assert.Equal(t, time.Second, d.RetryAfter, "from 60 to 61")
	assert.Equal(t, int64(60), d.Remaining[llmrate.KeyRequests], "nothing debited")
	d = admit(0, 5*time.Second)
	require.True(t, d.Allowed, "no reserve")
	assert.Zero(t, d.Wait, "fits now")
	assert.Equal(t, int64(59), d.Remaining[llmrate.KeyRequests])
	d = admit(500_000, 5*time.Second)
	assert.False(t, d.Allowed)
	assert.True(t, d.ByReserve)
	assert.Equal(t, 2*time.Second, d.RetryAfter, "from 59 to 61")
	for i := range 59 {
		require.True(t, admit(0, 0).Allowed, "%d", i)
	}
	d = admit(0, 5*time.Second)
	require.True(t, d.Allowed, "no reserve: a reservation, as without reserves")
	assert.Equal(t, time.Second, d.Wait)
	assert.Equal(t, int64(-1), d.Remaining[llmrate.KeyRequests])
}

// TestReserveResentIDDebitsNothing: a reserved admission sent again under
// its ID (a lost reply) is answered with its first decision and debits
// nothing again.
func TestReserveResentIDDebitsNothing(t *testing.T) {
	srv := redistest.Start(t)
	s := prioStore(t, srv.Addr, "", prioClock)
	ctx := context.Background()
	lim := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1_000}
	r := llmrate.AdmitRequest{Key: "sk-id", Workspace: "acme-id", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 100,
		ID: llmrate.NewAdmissionID(), Reserve: 500_000}
	first, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, first.Allowed)
	assert.Equal(t, [4]int64{19, 1_900, 19, 1_900}, first.Remaining)
	for range 3 {
		again, err := s.Admit(ctx, r)
		require.NoError(t, err)
		assert.Equal(t, first, again)
	}
	r.ID = llmrate.NewAdmissionID()
	next, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, next.Allowed)
	assert.Equal(t, [4]int64{18, 1_800, 18, 1_800}, next.Remaining, "one debit per identity")
}

// The child process of TestReserveThreeProcessesHalfTheBucket: a store of
// its own on PRIO_CHILD_ADDR under PRIO_CHILD_PREFIX, its clock stopped at
// prioClock, sending PRIO_CHILD_N admissions of 10 tokens with reserve
// PRIO_CHILD_RESERVE from 8 goroutines, printing how many were admitted.
func TestReserveChildProcess(t *testing.T) {
	addr := os.Getenv("PRIO_CHILD_ADDR")
	if addr == "" {
		t.Skip("a child of TestReserveThreeProcessesHalfTheBucket only")
	}
	n, _ := strconv.Atoi(os.Getenv("PRIO_CHILD_N"))
	reserve, _ := strconv.ParseInt(os.Getenv("PRIO_CHILD_RESERVE"), 10, 64)
	s := prioStore(t, addr, os.Getenv("PRIO_CHILD_PREFIX"), prioClock)
	var admitted, byReserve atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				d, err := s.Admit(context.Background(), prioRequest(reserve))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else if d.ByReserve {
					byReserve.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("PRIO admitted=%d byreserve=%d\n", admitted.Load(), byReserve.Load())
}

// prioRequest is one request of the shared key: 10 tokens of a bucket of
// 2,000 (1,000 tokens a minute; requests roomy).
func prioRequest(reserve int64) llmrate.AdmitRequest {
	kl := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000}
	wl := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000}
	return llmrate.AdmitRequest{Key: "sk-shared", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 10,
		ID: llmrate.NewAdmissionID(), Reserve: reserve}
}

// TestReserveThreeProcessesHalfTheBucket: three processes (separate OS
// processes, each its own store, batching as by default) on one Redis, a
// "batch" class with a reserve of one half on one key of 2,000 tokens (no
// refill: the clock is stopped): 3 × 150 batch requests of 10 tokens
// together get exactly half the bucket, 100; then 3 × 150 requests without
// a reserve get exactly the other 100.
func TestReserveThreeProcessesHalfTheBucket(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "prio3p" + strconv.FormatInt(prioPrefixes.Add(1), 10)
	phase := func(reserve int64) (admitted, byReserve int64) {
		type out struct {
			b   []byte
			err error
		}
		outs := make([]out, 3)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Go(func() {
				cmd := exec.Command(os.Args[0], "-test.run=^TestReserveChildProcess$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(), "PRIO_CHILD_ADDR="+srv.Addr, "PRIO_CHILD_PREFIX="+prefix, "PRIO_CHILD_N=150",
					"PRIO_CHILD_RESERVE="+strconv.FormatInt(reserve, 10))
				outs[i].b, outs[i].err = cmd.CombinedOutput()
			})
		}
		wg.Wait()
		for _, o := range outs {
			require.NoError(t, o.err, "%s", o.b)
			var a, b int64
			for _, line := range strings.Split(string(o.b), "\n") {
				if _, err := fmt.Sscanf(line, "PRIO admitted=%d byreserve=%d", &a, &b); err == nil {
					break
				}
			}
			require.Contains(t, string(o.b), "PRIO admitted=", "%s", o.b)
			t.Logf("reserve %d: a process admitted %d (refused by the reserve: %d)", reserve, a, b)
			admitted += a
			byReserve += b
		}
		return admitted, byReserve
	}
	batch, byReserve := phase(500_000)
	assert.Equal(t, int64(100), batch, "the batch class gets exactly half of the bucket across three processes")
	assert.Equal(t, int64(350), byReserve, "every other batch request refused by the reserve")
	rest, _ := phase(0)
	assert.Equal(t, int64(100), rest, "traffic without a reserve gets the rest")
}

// TestReserveBypassesLeases: with leases, a reserved request is decided in
// Redis against the shared level, never from a lease: once another
// process spent the bucket down to the floor, the leaseholder's reserved
// request is refused (by the reserve, at the shared level less what is
// out on lease) although its lease has room; its plain requests still
// lease.
func TestReserveBypassesLeases(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "prioL" + strconv.FormatInt(prioPrefixes.Add(1), 10)
	a := prioStore(t, srv.Addr, prefix, prioClock, redisstore.WithLeases(0.25))
	b := prioStore(t, srv.Addr, prefix, prioClock, redisstore.WithBatching(1))
	ctx := context.Background()
	lim := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 1_000_000} // 200 requests
	req := func(reserve int64) llmrate.AdmitRequest {
		return llmrate.AdmitRequest{Key: "sk-l", Workspace: "acme-l", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1,
			ID: llmrate.NewAdmissionID(), Reserve: reserve}
	}
	// a takes a lease: its key is busy from the second admission on.
	for i := 0; a.Leased() == 0; i++ {
		require.Less(t, i, 20, "no lease taken")
		d, err := a.Admit(ctx, req(0))
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	leased := a.Leased()
	d, err := a.Admit(ctx, req(500_000))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, leased, a.Leased(), "a reserved request is not decided on the lease")
	shared := d.Remaining[llmrate.KeyRequests]
	assert.Less(t, shared, int64(200-50), "the level it sees is Redis's, less the lease out (50)")
	// b spends the shared bucket down to the floor (100).
	spent := int64(0)
	for {
		d, err := b.Admit(ctx, req(500_000))
		require.NoError(t, err)
		if !d.Allowed {
			assert.True(t, d.ByReserve)
			assert.Equal(t, int64(100), d.Remaining[llmrate.KeyRequests])
			break
		}
		spent++
	}
	// (shared − 100, unless a's returner gave an idle lease back meanwhile)
	t.Logf("the other process spent %d of the %d the reserved request saw", spent, shared)
	d, err = a.Admit(ctx, req(500_000))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "its lease has room, but the shared bucket is at the floor")
	assert.True(t, d.ByReserve)
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.Equal(t, int64(100), d.Remaining[llmrate.KeyRequests])
	leased = a.Leased()
	for range 20 {
		d, err := a.Admit(ctx, req(0))
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	assert.Greater(t, a.Leased(), leased, "plain requests still lease")
}

// TestReserveWithBatching: with batching, concurrent reserved requests
// each take a call of their own (never shared) and together get exactly
// the bucket less the floor; concurrent plain requests then share calls
// and get exactly the rest.
func TestReserveWithBatching(t *testing.T) {
	srv := redistest.Start(t)
	s := prioStore(t, srv.Addr, "", prioClock, redisstore.WithBatching(32))
	lim := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 1_000_000} // 200 requests
	run := func(reserve int64, n int) (admitted, calls int64) {
		before := scriptCalls(t, srv.Addr)
		var got atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range n {
					d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-b", Workspace: "sk-b", Solo: true,
						KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, ID: llmrate.NewAdmissionID(), Reserve: reserve})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						got.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return got.Load(), scriptCalls(t, srv.Addr) - before
	}
	admitted, calls := run(250_000, 3) // floor ⌈0.25 × 200⌉ = 50
	assert.Equal(t, int64(150), admitted)
	assert.GreaterOrEqual(t, calls, int64(192), "one call (or more: hedges) per reserved request")
	admitted, calls = run(0, 10)
	assert.Equal(t, int64(50), admitted)
	t.Logf("640 plain admissions in %d script calls", calls)
	assert.Less(t, calls, int64(640), "plain requests still share calls")
}

// TestReserveSilentReplyHedgedOnce: a reserved admission whose reply is
// lost on a connection that stays open is hedged with its identity and
// decided by Redis within the timeout, debited once: the class still
// reaches exactly its share of the bucket, no more.
func TestReserveSilentReplyHedgedOnce(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr, 1)
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() {
		_ = c.Close()
		_ = p.Close()
	})
	s, err := redisstore.New(c, redisstore.WithHashKey(prioSecret), redisstore.WithPrefix("priosilent"), redisstore.WithTimeout(time.Second),
		redisstore.WithClock(func() time.Time { return prioClock }), redisstore.WithFallbackLocal())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close(context.Background())) })
	ctx := context.Background()
	lim := llmrate.Limits{RequestsPerMinute: 5, TokensPerMinute: 1_000} // 10 requests, floor 5 at one half
	req := func() llmrate.AdmitRequest {
		return llmrate.AdmitRequest{Key: "sk-s", Workspace: "sk-s", Solo: true, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1,
			ID: llmrate.NewAdmissionID(), Reserve: 500_000}
	}
	d, err := s.Admit(ctx, req()) // loads the script
	require.NoError(t, err)
	require.True(t, d.Allowed)
	p.SilenceNext(1)
	d, err = s.Admit(ctx, req())
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Empty(t, d.Receipt, "decided by Redis, not by the fallback")
	assert.Equal(t, int64(1), p.Stats().Silenced)
	assert.Equal(t, int64(1), s.Hedges())
	assert.Equal(t, int64(8), d.Remaining[llmrate.KeyRequests], "debited once")
	for range 3 {
		d, err = s.Admit(ctx, req())
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err = s.Admit(ctx, req())
	require.NoError(t, err)
	assert.False(t, d.Allowed, "5 of 10 taken: the rest is the reserve")
	assert.True(t, d.ByReserve)
	assert.Equal(t, int64(5), d.Remaining[llmrate.KeyRequests])
}
