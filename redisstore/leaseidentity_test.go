package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/llmratetest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeaseReconcileIdentityBounded: 300,000 admit+reconcile pairs on a
// lease over 60 s of the store's clock, each reconcile absorbed by the
// lease. The record of reconcile identities holds the last 30 s's (and
// a few not yet popped), and expiry examines a bounded number of
// identities per reconcile (each once), whatever the rate: no walk of the
// whole record.
func TestLeaseReconcileIdentityBounded(t *testing.T) {
	_, c := redisrig.Start(t)
	clk := llmratetest.NewClock()
	// A generous timeout: the run is long, and the machine may be busy.
	s := redisrig.Stores(t, c, 1, redisstore.WithLeases(0.25), redisstore.WithClock(clk.Now), redisstore.WithTimeout(time.Second))[0]
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	ctx := context.Background()
	const pairs, span = 300_000, 60 * time.Second
	step := span / pairs
	perLife := int(30 * time.Second / step) // reconciles within a record's life
	var touched int64
	for i := range pairs {
		clk.Advance(step)
		id := "id-" + strconv.Itoa(i)
		a := llmrate.AdmitRequest{Key: "sk-l", Workspace: "sk-l", KeyLimits: huge, WorkspaceLimits: huge, Tokens: 100, Solo: true, Now: clk.Now(), ID: id}
		d, err := s.Admit(ctx, a)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "sk-l", Workspace: "sk-l", KeyLimits: huge, WorkspaceLimits: huge,
			Estimate: 100, Actual: 120, Solo: true, Now: clk.Now(), ID: id, Receipt: d.Receipt}))
		if (i+1)%10_000 == 0 {
			held, _, tn := s.SeenIDs()
			live := min(i+1, perLife)
			assert.LessOrEqual(t, held, live+8, "after %d reconciles: identities held", i+1)
			assert.GreaterOrEqual(t, held, live-1, "after %d reconciles: identities held", i+1)
			assert.LessOrEqual(t, tn-touched, int64(2*10_000), "reconciles %d..%d: identities examined", i-9_999, i)
			touched = tn
		}
	}
	held, _, tn := s.SeenIDs()
	t.Logf("%d pairs over %v: %d identities held, %d examined in all, %d admissions on a lease", pairs, span, held, tn, s.Leased())
	assert.Greater(t, s.Leased(), pairs*9/10, "admissions decided on a lease")
	assert.LessOrEqual(t, tn, int64(pairs), "identities examined, each at most once")
}

// leaseRig is one process with a lease on sk-o (capacity 2,000,000 tokens,
// leases of 500,000), on a clock that does not move unless told.
type leaseRig struct {
	t   *testing.T
	s   *redisstore.Store
	clk *llmratetest.Clock
	lim llmrate.Limits
	n   int
}

func newLeaseRig(t *testing.T, opts ...redisstore.Option) *leaseRig {
	_, c := redisrig.Start(t)
	clk := llmratetest.NewClock()
	s := redisrig.Stores(t, c, 1, append([]redisstore.Option{redisstore.WithLeases(0.25), redisstore.WithClock(clk.Now), redisstore.WithTimeout(time.Second)}, opts...)...)[0]
	return &leaseRig{t: t, s: s, clk: clk, lim: llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000}}
}

// admit admits 100 tokens under a fresh ID and returns it with the
// decision.
func (g *leaseRig) admit() (string, llmrate.Decision) {
	g.n++
	id := "id-" + strconv.Itoa(g.n)
	d, err := g.s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-o", Workspace: "sk-o", KeyLimits: g.lim, WorkspaceLimits: g.lim,
		Tokens: 100, Solo: true, Now: g.clk.Now(), ID: id})
	require.NoError(g.t, err)
	require.True(g.t, d.Allowed)
	return id, d
}

// reconcile reports 1,100 tokens used by admission id (estimated 100).
func (g *leaseRig) reconcile(id string) {
	require.NoError(g.t, g.s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: "sk-o", Workspace: "sk-o", KeyLimits: g.lim, WorkspaceLimits: g.lim,
		Estimate: 100, Actual: 1_100, Solo: true, Now: g.clk.Now(), ID: id}))
}

// tokens is the bucket's exact level, as an admission reports it (its own
// 100 tokens spent).
func (g *leaseRig) tokens() int64 {
	_, d := g.admit()
	return d.Remaining[llmrate.KeyTokens]
}

// TestLeaseReconcileResentWithin30s: a reconcile a lease absorbed, sent
// again 29 s later, is not applied again.
func TestLeaseReconcileResentWithin30s(t *testing.T) {
	g := newLeaseRig(t)
	g.admit()
	id, _ := g.admit() // busy: on a lease
	g.reconcile(id)
	g.clk.Advance(29 * time.Second) // refills past capacity: read the level first
	before := g.tokens()
	g.reconcile(id)
	// Nothing refills on the unmoved clock: only the admission's 100.
	assert.Equal(t, before-100, g.tokens(), "a resent reconcile within 30 s applied again")
}

// TestLeaseReconcileRecordFull: with the record of identities at its
// bound, a reconcile the lease could absorb goes to Redis instead (which
// keeps its identity 30 s), and so does every reconcile for the next
// 30 s: a resend of one absorbed before, or of one sent to Redis, is
// applied once.
func TestLeaseReconcileRecordFull(t *testing.T) {
	g := newLeaseRig(t)
	g.s.SetSeenBound(3)
	g.admit()
	var ids []string
	for range 5 {
		id, _ := g.admit()
		ids = append(ids, id)
	}
	for _, id := range ids {
		g.reconcile(id)
	}
	held, limit, _ := g.s.SeenIDs()
	assert.Equal(t, 3, limit)
	assert.LessOrEqual(t, held, 3, "identities held")
	// Every one resent, before any admission takes a lease again (a
	// repeat Redis answers as applied returns no lease sent with it).
	for _, id := range ids {
		g.reconcile(id)
	}
	// Capacity 2,000,000; 1 + 5 admissions of 100, five debits of 1,000,
	// and the reading's own 100.
	assert.Equal(t, int64(2_000_000-7*100-5*1_000), g.tokens(), "resent reconciles applied again")
	g.clk.Advance(10 * time.Second) // still within 30 s of the overflow: to Redis
	before := g.tokens()
	id, _ := g.admit()
	g.reconcile(id) // to Redis, with the lease
	g.reconcile(id)
	// The clock did not move since the reading: its 100, the admission's
	// 100 and one debit of 1,000.
	assert.Equal(t, before-1_200, g.tokens(), "a reconcile within 30 s of the overflow, sent twice")
}

// TestFallbackIdentitiesBounded: while Redis is out the local fallback is
// sent every admission's identity; past its bound of 65,536 it forgets the
// oldest, counted in ForgottenIDs, and a resend of a recent admission is
// still answered with its first decision, debiting nothing.
func TestFallbackIdentitiesBounded(t *testing.T) {
	_, p, c := faultyRedis(t)
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithFallbackLocal(), redisstore.WithTimeout(200*time.Millisecond))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	ctx := context.Background()
	p.setDown(true)
	const n = 70_000
	req := func(i int) llmrate.AdmitRequest {
		return llmrate.AdmitRequest{Key: "sk-f", Workspace: "sk-f", KeyLimits: huge, WorkspaceLimits: huge, Tokens: 1, Solo: true, Now: frozen(), ID: "f-" + strconv.Itoa(i)}
	}
	var last llmrate.Decision
	for i := range n {
		d, err := s.Admit(ctx, req(i))
		require.NoError(t, err)
		require.True(t, d.Allowed)
		last = d
	}
	assert.GreaterOrEqual(t, s.ForgottenIDs(), int64(n-65_536), "fallback identities forgotten for room")
	again, err := s.Admit(ctx, req(n-1))
	require.NoError(t, err)
	assert.Equal(t, last, again, "a resend of the last admission")
	next, err := s.Admit(ctx, req(n))
	require.NoError(t, err)
	assert.Equal(t, last.Remaining[llmrate.KeyRequests]-1, next.Remaining[llmrate.KeyRequests], "the resend debited again")
}

// BenchmarkLeaseAdmitReconcile: one goroutine's admit+reconcile pairs on
// a hot key's lease (share 0.25), each reconcile absorbed by the lease, on
// the real clock, with a fresh identity each as the limiter sends. Reports
// ns per pair over the whole run and over its last tenth (last10-ns/pair):
// with a record whose cost grows with the identities held, the last tenth
// costs more than the first.
func BenchmarkLeaseAdmitReconcile(b *testing.B) {
	_, c := redisrig.Start(b)
	s := redisrig.Stores(b, c, 1, redisstore.WithLeases(0.25))[0]
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	ctx := context.Background()
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = llmrate.NewAdmissionID()
	}
	tenth := max(1, b.N/10)
	var lastStart time.Time
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if i == b.N-tenth {
			lastStart = time.Now()
		}
		now := time.Now()
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-b", Workspace: "sk-b", KeyLimits: huge, WorkspaceLimits: huge, Tokens: 100, Solo: true, Now: now, ID: ids[i]})
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
		if err := s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "sk-b", Workspace: "sk-b", KeyLimits: huge, WorkspaceLimits: huge,
			Estimate: 100, Actual: 120, Solo: true, Now: now, ID: ids[i], Receipt: d.Receipt}); err != nil {
			b.Fatal(err)
		}
	}
	end := time.Now()
	b.StopTimer()
	b.ReportMetric(float64(end.Sub(start).Nanoseconds())/float64(b.N), "ns/pair")
	b.ReportMetric(float64(end.Sub(lastStart).Nanoseconds())/float64(tenth), "last10-ns/pair")
	b.ReportMetric(float64(s.Leased())/float64(b.N), "leased/op")
}
