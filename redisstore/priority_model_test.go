package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReservesMatchReference: random admissions with random reserves (none,
// the smallest, a half, the largest, any), with and without windows, with
// and without MaxWait, reconciles and refunds, clock steps and figure
// changes, up to the largest figures allowed: Redis decides every one
// exactly as the independent big.Rat model, every Decision field
// (ByReserve included).
func TestReservesMatchReference(t *testing.T) {
	srv := redistest.Start(t)
	// One connection: no hedge is ever sent (it would need a second), so
	// no late duplicate of a refused admission can land after the next
	// step on a loaded machine and spend what the model still holds.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var now time.Time
	rs, err := redisstore.New(c, redisstore.WithHashKey(prioSecret), redisstore.WithTimeout(10*time.Second),
		redisstore.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rs.Close(context.Background())) })
	ctx := context.Background()
	pers := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, 744 * time.Hour}
	steps, refused, byReserve, reservations, reservedAdmits := 0, 0, 0, 0, 0
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 19))
		ref := &refModel{b: map[string]*refBucket{}}
		now = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
		big := seed%5 == 0 // the largest figures allowed
		fig := func(scale int64) int64 {
			switch rng.IntN(6) {
			case 0, 1, 2:
				return 0
			case 3:
				return 1 + scale/2 + rng.Int64N(scale)
			case 4:
				return scale + rng.Int64N(20*scale)
			}
			return llmrate.MaxPerMinute - rng.Int64N(3)
		}
		windows := func(rpm, tpm int64) []llmrate.Window {
			var ws []llmrate.Window
			for _, i := range rng.Perm(len(pers))[:rng.IntN(3)] {
				w := llmrate.Window{Per: pers[i], Requests: fig(rpm), Tokens: fig(tpm), InputTokens: fig(tpm), OutputTokens: fig(tpm)}
				if w.Requests+w.Tokens+w.InputTokens+w.OutputTokens == 0 {
					w.Requests = 3 + rng.Int64N(5)
				}
				ws = append(ws, w)
			}
			return ws
		}
		limits := func() llmrate.Limits {
			rpm, tpm := 1+rng.Int64N(20), 1+rng.Int64N(5000)
			if big {
				rpm, tpm = llmrate.MaxPerMinute-rng.Int64N(3), llmrate.MaxPerMinute/2-rng.Int64N(3)
			}
			return llmrate.Limits{RequestsPerMinute: rpm, TokensPerMinute: tpm, Windows: windows(rpm, tpm)}
		}
		solo := rng.IntN(3) == 0
		key, ws := fmt.Sprintf("sk-%d", seed), fmt.Sprintf("ws-%d", seed)
		if solo {
			ws = key
		}
		kl := limits()
		wl := kl
		if !solo {
			wl = limits()
		}
		reserves := []int64{0, 1, 500_000, 250_000, llmrate.MaxReserve, 1 + rng.Int64N(llmrate.MaxReserve)}
		for step := range 40 {
			steps++
			switch x := rng.IntN(10); {
			case x < 4:
				now = now.Add(time.Duration(rng.Int64N(40_000_000)) * time.Microsecond)
			case x == 4:
				now = now.Add(time.Duration(rng.Int64N(3_600_000_000)) * time.Microsecond)
			case x == 5:
				now = now.Add(-time.Duration(rng.Int64N(5_000_000)) * time.Microsecond)
			case x == 6 && !big:
				kl.RequestsPerMinute = 1 + rng.Int64N(20)
				if solo {
					wl = kl
				}
			}
			tpm := min(kl.TokensPerMinute, wl.TokensPerMinute)
			req := llmrate.AdmitRequest{Key: key, Workspace: ws, Model: []string{"", "gpt-4o*"}[rng.IntN(2)], KeyLimits: kl, WorkspaceLimits: wl,
				Tokens: 1 + rng.Int64N(min(tpm, 4000)), InputTokens: rng.Int64N(min(tpm, 4000)), Solo: solo, ID: llmrate.NewAdmissionID(),
				Reserve: reserves[rng.IntN(len(reserves))]}
			if big && rng.IntN(2) == 0 { // near the whole capacity less the floor
				req.Tokens = max(1, 2*tpm-refFloor(req.Reserve, 2*tpm)-rng.Int64N(3)+1)
			}
			if rng.IntN(3) == 0 {
				req.MaxWait = time.Duration(rng.Int64N(30_000_000)) * time.Microsecond
			}
			want := ref.admit(req, now.UnixMicro())
			if req.Reserve == 0 && len(kl.Windows)+len(wl.Windows) == 0 && !want.Allowed {
				// Neither a reserve nor windows: the scripts that ran
				// before reserves answer, as before (no Window; without
				// MaxWait, RetryAfter in whole seconds).
				want.Window = 0
				if req.MaxWait == 0 {
					want.RetryAfter = (want.RetryAfter + time.Second - 1).Truncate(time.Second)
				}
			}
			got, err := rs.Admit(ctx, req)
			require.NoError(t, err)
			require.Equal(t, want, got, "seed %d step %d: %+v", seed, step, req)
			if !got.Allowed {
				refused++
				if got.ByReserve {
					byReserve++
				}
				continue
			}
			if req.Reserve > 0 {
				reservedAdmits++
			}
			if got.Wait > 0 {
				reservations++
			}
			if rng.IntN(3) == 0 {
				continue
			}
			rec := llmrate.ReconcileRequest{Key: key, Workspace: ws, Model: req.Model, KeyLimits: kl, WorkspaceLimits: wl, Solo: solo, ID: req.ID,
				Estimate: req.Tokens, Actual: rng.Int64N(3 * min(tpm, 4000)), InputEstimate: req.InputTokens, InputActual: rng.Int64N(3 * min(tpm, 4000)),
				OutputActual: rng.Int64N(3 * min(tpm, 4000)), Refund: rng.IntN(6) == 0}
			ref.reconcile(req, rec, now.UnixMicro())
			require.NoError(t, rs.Reconcile(ctx, rec))
		}
	}
	t.Logf("%d steps: %d refused (%d by a reserve), %d reservations, %d reserved admissions", steps, refused, byReserve, reservations, reservedAdmits)
	require.Greater(t, byReserve, steps/20)
	require.Greater(t, refused-byReserve, steps/20)
	require.Greater(t, reservedAdmits, steps/10)
	require.Greater(t, reservations, steps/800) // only requests without a reserve wait
}

// TestReserveFloorsExactAtLargestFigures: floors whose quotient a double
// would get wrong (r × c past 2^53), in a per-minute tokens bucket of
// capacity 999,999,999,998 and in a window of that figure: a reserve of
// 999,999 keeps ⌈999,999 × 999,999,999,998 / 10^6⌉ = 999,998,999,999, so
// the class can spend exactly 999,999 tokens: 1,000,000 never fits, and
// after 999,999 the next token is refused by the reserve.
func TestReserveFloorsExactAtLargestFigures(t *testing.T) {
	srv := redistest.Start(t)
	s := prioStore(t, srv.Addr, "", time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	ctx := context.Background()
	const figure, r, floor = 999_999_999_998, llmrate.MaxReserve, 999_998_999_999
	require.Equal(t, int64(floor), refFloor(r, figure))
	for _, tc := range []struct {
		name   string
		limits llmrate.Limits
		code   llmrate.Bucket
		window time.Duration
		level  func(llmrate.Decision) int64
	}{
		{"per-minute", llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: figure / 2}, llmrate.KeyTokens, time.Minute,
			func(d llmrate.Decision) int64 { return d.Remaining[llmrate.KeyTokens] }},
		{"window", llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute,
			Windows: []llmrate.Window{{Per: 744 * time.Hour, Tokens: figure}}}, llmrate.KeyTokens, 744 * time.Hour,
			func(d llmrate.Decision) int64 { return d.KeyWindows[0].Tokens }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
			req := llmrate.AdmitRequest{Key: "sk-big-" + tc.name, Workspace: "acme-" + tc.name, KeyLimits: tc.limits, WorkspaceLimits: ws,
				Tokens: 1_000_000, Reserve: r, ID: llmrate.NewAdmissionID()}
			d, err := s.Admit(ctx, req)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.True(t, d.NeverFits, "1,000,000 tokens > capacity less the floor (999,999)")
			assert.True(t, d.ByReserve, "the full bucket holds 1,000,000 tokens")
			assert.Equal(t, tc.code, d.Refused)
			assert.Equal(t, tc.window, d.Window)

			req.Tokens, req.ID = 999_999, llmrate.NewAdmissionID()
			d, err = s.Admit(ctx, req)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%+v", d)
			assert.Equal(t, int64(floor), tc.level(d), "the class spent the bucket down to its floor exactly")

			req.Tokens, req.ID = 1, llmrate.NewAdmissionID()
			d, err = s.Admit(ctx, req)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.True(t, d.ByReserve)
			assert.False(t, d.NeverFits)
			assert.Equal(t, tc.code, d.Refused)

			req.Reserve, req.ID = 0, llmrate.NewAdmissionID()
			req.Tokens = floor
			d, err = s.Admit(ctx, req)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "traffic without a reserve spends the rest")
			assert.Equal(t, int64(0), tc.level(d))
		})
	}
}

// TestReservesSameDecisionInBothStores: one random sequence of admissions
// (with and without reserves, windows, gauges, MaxWait, Solo) and
// reconciles (releasing the gauges' slots), sent
// to the memory store and to Redis on one clock: every admission with a
// reserve or windows gets the same Decision from both (the reserve, as
// the windows, is part of the one decision in both stores). The figures
// change now and then (windows added, dropped, resized), and reconciles
// land later, in any order, carrying the figures of their admission: a
// store keeps levels, not figures, so neither refills a window at a
// reconcile's stale figures.
func TestReservesSameDecisionInBothStores(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var now time.Time
	rs, err := redisstore.New(c, redisstore.WithHashKey(prioSecret), redisstore.WithTimeout(10*time.Second),
		redisstore.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rs.Close(context.Background())) })
	ctx := context.Background()
	// The memory store's waits are in nanoseconds, Redis's rounded up to
	// whole microseconds (its clock's unit): compared in microseconds.
	us := func(d time.Duration) time.Duration { return (d + time.Microsecond - 1).Truncate(time.Microsecond) }
	norm := func(d llmrate.Decision) llmrate.Decision {
		d.RetryAfter, d.Wait = us(d.RetryAfter), us(d.Wait)
		d.Receipt = "" // each store's own
		if len(d.KeyWindows) == 0 {
			d.KeyWindows = nil
		}
		if len(d.WorkspaceWindows) == 0 {
			d.WorkspaceWindows = nil
		}
		return d
	}
	pers := []time.Duration{time.Second, time.Minute, time.Hour}
	compared, gaugeByReserve, byReserve, figChanges := 0, 0, 0, 0
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 23))
		mem := llmrate.NewMemoryStore()
		now = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
		limits := func() llmrate.Limits {
			l := llmrate.Limits{RequestsPerMinute: 1 + rng.Int64N(20), TokensPerMinute: 1 + rng.Int64N(5000), ConcurrentRequests: rng.Int64N(3) * rng.Int64N(5)}
			for _, i := range rng.Perm(len(pers))[:rng.IntN(2)] {
				l.Windows = append(l.Windows, llmrate.Window{Per: pers[i], Requests: 3 + rng.Int64N(30), OutputTokens: rng.Int64N(3) * (1 + rng.Int64N(3000))})
			}
			return l
		}
		solo := rng.IntN(3) == 0
		key, ws := fmt.Sprintf("both-sk-%d", seed), fmt.Sprintf("both-ws-%d", seed)
		if solo {
			ws = key
		}
		kl := limits()
		wl := kl
		if !solo {
			wl = limits()
		}
		reserves := []int64{0, 1, 500_000, 250_000, llmrate.MaxReserve, 1 + rng.Int64N(llmrate.MaxReserve)}
		var pending []llmrate.ReconcileRequest
		land := func(rec llmrate.ReconcileRequest) {
			rec.Now = now
			require.NoError(t, mem.Reconcile(ctx, rec))
			require.NoError(t, rs.Reconcile(ctx, rec))
		}
		for step := range 40 {
			if rng.IntN(3) == 0 {
				now = now.Add(time.Duration(rng.Int64N(20_000_000)) * time.Microsecond)
			}
			if rng.IntN(10) == 0 { // minutes to an hour and a half
				now = now.Add(time.Duration(rng.Int64N(5_400_000_000)) * time.Microsecond)
			}
			if rng.IntN(8) == 0 { // new figures: the reconciles in flight keep the old
				figChanges++
				kl = limits()
				if solo {
					wl = kl
				} else if rng.IntN(2) == 0 {
					wl = limits()
				}
			}
			for len(pending) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(pending))
				land(pending[i])
				pending = append(pending[:i], pending[i+1:]...)
			}
			tpm := min(kl.TokensPerMinute, wl.TokensPerMinute)
			req := llmrate.AdmitRequest{Key: key, Workspace: ws, KeyLimits: kl, WorkspaceLimits: wl, Now: now,
				Tokens: 1 + rng.Int64N(min(tpm, 4000)), InputTokens: rng.Int64N(min(tpm, 4000)), Solo: solo, ID: llmrate.NewAdmissionID(),
				Reserve: reserves[rng.IntN(len(reserves))]}
			if rng.IntN(3) == 0 {
				req.MaxWait = time.Duration(rng.Int64N(30_000_000)) * time.Microsecond
			}
			dm, err := mem.Admit(ctx, req)
			require.NoError(t, err)
			dr, err := rs.Admit(ctx, req)
			require.NoError(t, err)
			if req.Reserve > 0 || len(kl.Windows)+len(wl.Windows) > 0 {
				compared++
				require.Equal(t, norm(dm), norm(dr), "seed %d step %d: memory, then Redis: %+v", seed, step, req)
				if dm.ByReserve {
					byReserve++
					if dm.Refused.Concurrent() {
						gaugeByReserve++
					}
				}
			} else {
				require.Equal(t, dm.Allowed, dr.Allowed, "seed %d step %d: %+v", seed, step, req)
			}
			if !dm.Allowed || rng.IntN(2) == 0 {
				continue
			}
			// The receipts are left out: each store's own, and a reconcile
			// without one is decided as well (the gauge's slot goes by ID).
			rec := llmrate.ReconcileRequest{Key: key, Workspace: ws, KeyLimits: kl, WorkspaceLimits: wl, Solo: solo, ID: req.ID,
				Estimate: req.Tokens, Actual: rng.Int64N(2 * min(tpm, 4000)), InputEstimate: req.InputTokens, InputActual: rng.Int64N(2 * min(tpm, 4000)),
				OutputActual: rng.Int64N(2 * min(tpm, 4000))}
			pending = append(pending, rec)
		}
	}
	t.Logf("%d decisions compared, %d refused by a reserve (%d by a gauge's), %d figure changes", compared, byReserve, gaugeByReserve, figChanges)
	require.Greater(t, byReserve, compared/20)
	require.Positive(t, gaugeByReserve)
}
