package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStallResendsWithinHedgeBounds: a short Redis stall (every reply held
// 300 ms, as a fork, a failover or a congested link gives) while 64 calls
// are in flight. Each first attempt waits on its caller's goroutine, and
// those that give up are sent again only as hedges are, within the
// store's bounds (16 in flight; per window, 16 plus 10% of its calls): the
// stall does not become one extra script and one new connection per
// caller (review reproducer: 64 of each).
func TestStallResendsWithinHedgeBounds(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.NewClient(t, &redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 256})
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(400*time.Millisecond))
	ctx := context.Background()
	const n = 64
	burst := func(tag string) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, err := s.Admit(ctx, soloReq("sk-"+tag+strconv.Itoa(i), 1))
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	_, err := s.Admit(ctx, soloReq("sk-load", 1))
	require.NoError(t, err)
	burst("warm")
	conns0, hedges0 := p.Stats().Conns, s.Hedges()
	require.NoError(t, p.Set(faultproxy.Faults{SpikeReply: 1, Spike: 300 * time.Millisecond}))
	clear := time.AfterFunc(60*time.Millisecond, func() { _ = p.Set(faultproxy.Faults{}) })
	defer clear.Stop()
	burst("stall")
	hedges, dialed := s.Hedges()-hedges0, p.Stats().Conns-conns0
	t.Logf("a stall with %d calls in flight: %d hedges, %d new connections", n, hedges, dialed)
	assert.LessOrEqual(t, hedges, int64(16+(2*n+1)/10+1), "within the hedges' budget (one lone call's resend beside it)")
	assert.LessOrEqual(t, dialed, int64(2*(16+1)), "far from a new connection per caller: about one per call sent again (a resent hedge may dial twice)")
}

// TestBurstKeepsConnections: a burst of 64 calls after a quiet spell (the
// hedge delay learned at its 500 µs floor, one call at a time) queues for
// the pool's connections and their handshakes; no fault, so the pool keeps
// its connections (review reproducer: about a fifth closed, their calls
// counted as hedges, when every first attempt waited only four delays:
// now sixteen, and at least 100 ms: on a slower machine under the race
// detector, at least 50 ms still closed 4 to 60 of them).
func TestBurstKeepsConnections(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.NewClient(t, &redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithTimeout(400*time.Millisecond))
	direct := redisrig.Client(t, srv.Addr)
	ran := func() int64 { // EVALSHAs Redis ran
		info, err := direct.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		i := strings.Index(info, "cmdstat_evalsha:calls=")
		require.GreaterOrEqual(t, i, 0)
		rest := info[i+len("cmdstat_evalsha:calls="):]
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		require.NoError(t, err)
		return n
	}
	ctx := context.Background()
	learnHedgeDelay(t, s)
	runs0, conns0, pool0 := ran(), p.Stats().Conns, int64(c.PoolStats().TotalConns)
	const n, rounds = 64, 5
	var extraHedges atomic.Int64
	hedges0 := s.Hedges()
	for r := range rounds {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, err := s.Admit(ctx, soloReq("sk-q"+strconv.Itoa(r*n+i), 0))
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	extraHedges.Store(s.Hedges() - hedges0)
	extra, dialed := ran()-runs0-n*rounds, p.Stats().Conns-conns0
	closed := dialed - (int64(c.PoolStats().TotalConns) - pool0)
	t.Logf("%d calls: %d hedges, %d scripts run beyond one per call, %d connections dialed, %d closed", n*rounds, extraHedges.Load(), extra, dialed, closed)
	assert.LessOrEqual(t, closed, int64(rounds), "no fault: the pool keeps its connections (give or take one a round)")
	assert.LessOrEqual(t, extraHedges.Load(), extra+2, "hedges counted are calls Redis ran again (give or take one in flight)")
}

// TestSlowStartKeepsConnections: a store that has not yet learned how long
// Redis takes to answer (fewer calls than one hedge window) meets replies
// slower than an inline first attempt's wait but within the call's time,
// as a gateway starting under load on busy cores does. Its calls are
// decided by Redis, and no connection is closed: waiting inline on a
// guessed delay, each call's timeout closed its connection, its late
// reply with it, and its resend came too late (spill harness, plain mode,
// a slower machine: 6 of 15 runs beyond exact, every fallback admission
// in a run's first second).
func TestSlowStartKeepsConnections(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	const n = 8
	c := redisrig.NewClient(t, &redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithBatching(1), redisstore.WithFallbackLocal(),
		redisstore.WithTimeout(time.Second))
	ctx := context.Background()
	burst := func(tag string) []string {
		var wg sync.WaitGroup
		receipts := make([]string, n)
		for i := range n {
			wg.Go(func() {
				d, err := s.Admit(ctx, soloReq(tag+strconv.Itoa(i), 0))
				assert.NoError(t, err)
				receipts[i] = d.Receipt
			})
		}
		wg.Wait()
		return receipts
	}
	// n connections open and greeted (a gateway's pool after its first
	// moments), Redis known to answer, nothing learned yet: n calls at
	// once, each held 50 ms. Then every reply is held 700 ms: past the
	// 500 ms an inline first attempt waited before a delay was learned,
	// within the call's 1 s.
	// On a loaded machine the calls of one burst may not all overlap:
	// bursts until the pool holds n connections.
	require.NoError(t, p.Set(faultproxy.Faults{SpikeReply: 1, Spike: 50 * time.Millisecond}))
	for try := 0; c.PoolStats().TotalConns < n && try < 10; try++ {
		require.Equal(t, make([]string, n), burst("sk-warm"+strconv.Itoa(try)+"-"))
	}
	require.GreaterOrEqual(t, int(c.PoolStats().TotalConns), n)
	require.NoError(t, p.Set(faultproxy.Faults{SpikeReply: 1, Spike: 700 * time.Millisecond}))
	conns0, pool0 := p.Stats().Conns, int64(c.PoolStats().TotalConns)
	receipts := burst("sk-slow")
	dialed := p.Stats().Conns - conns0
	closed := dialed - (int64(c.PoolStats().TotalConns) - pool0)
	t.Logf("%d calls with every reply 700 ms late: receipts %q, %d hedges, %d connections dialed, %d closed", n, receipts, s.Hedges(), dialed, closed)
	for i, r := range receipts {
		assert.Empty(t, r, "call %d decided by Redis, not the fallback", i)
	}
	assert.Zero(t, closed, "slow replies within the call's time close no connection")
}
