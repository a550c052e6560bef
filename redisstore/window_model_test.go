package redisstore_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// refBucket is a bucket of the reference model: an integer level and a
// fraction of a unit in [0, 1), exact (big.Rat), refilled rate units per
// period µs up to cap.
type refBucket struct {
	seen  bool
	last  int64 // µs
	level int64
	frac  *big.Rat
	fig   int64 // a window bucket's: the figure of its latest admission
}

// refModel is an independent model of the store's decisions, written from
// DESIGN §4, §5 and §18 with big.Rat: every bucket a level and an exact
// fraction, no integer tricks.
type refModel struct{ b map[string]*refBucket }

type refSpec struct {
	id                  string
	rate, cap, period   int64 // period in µs
	need, take          int64
	code                llmrate.Bucket
	window              time.Duration
	scope, index, meter int // for the level slices; scope -1: a per-minute bucket
}

// at returns the bucket refilled up to now at s's figures, which it keeps
// (an admission's).
func (m *refModel) at(s refSpec, now int64) *refBucket {
	b := m.b[s.id]
	if b == nil {
		b = &refBucket{}
		m.b[s.id] = b
	}
	if b.seen && s.scope >= 0 {
		// A window bucket that time alone has refilled at its own figure
		// is forgotten: full again at s's.
		own := s
		own.rate, own.cap = b.fig, b.fig
		if c := *b; refill(&c, own, now).level >= b.fig {
			// Its clock kept, if later: a clock gone backwards refills nothing.
			*b = refBucket{seen: true, last: max(b.last, now), level: s.cap, frac: new(big.Rat), fig: s.rate}
			return b
		}
	}
	b.fig = s.rate
	if !b.seen {
		*b = refBucket{seen: true, last: now, level: s.cap, frac: new(big.Rat), fig: s.rate}
		return b
	}
	return refill(b, s, now)
}

// refill refills b up to now at s's figures.
func refill(b *refBucket, s refSpec, now int64) *refBucket {
	dt := now - b.last
	if dt > 0 {
		b.last = now
	} else {
		dt = 0
	}
	if b.level >= s.cap {
		b.level, b.frac = s.cap, new(big.Rat)
		return b
	}
	total := new(big.Rat).Add(b.frac, big.NewRat(0, 1).SetFrac(new(big.Int).Mul(big.NewInt(s.rate), big.NewInt(dt)), big.NewInt(s.period)))
	add := new(big.Int).Quo(total.Num(), total.Denom()) // total >= 0: floor
	if add.Cmp(big.NewInt(s.cap-b.level)) >= 0 {
		b.level, b.frac = s.cap, new(big.Rat)
		return b
	}
	b.level += add.Int64()
	b.frac = total.Sub(total, new(big.Rat).SetInt(add))
	return b
}

// waitUS is the exact µs, rounded up, until b holds need: (need - level -
// frac) × period / rate.
func waitUS(b *refBucket, s refSpec) int64 {
	if b.level >= s.need {
		return 0
	}
	d := new(big.Rat).Sub(new(big.Rat).SetInt64(s.need-b.level), b.frac)
	d.Mul(d, new(big.Rat).SetFrac64(s.period, s.rate))
	q, r := new(big.Int).QuoRem(d.Num(), d.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 1 << 62
	}
	return q.Int64()
}

var meterBuckets = [2][4]llmrate.Bucket{
	{llmrate.KeyRequests, llmrate.KeyTokens, llmrate.KeyInputTokens, llmrate.KeyOutputTokens},
	{llmrate.WorkspaceRequests, llmrate.WorkspaceTokens, llmrate.WorkspaceInputTokens, llmrate.WorkspaceOutputTokens},
}

func figureOf(w llmrate.Window, meter int) int64 {
	return [4]int64{w.Requests, w.Tokens, w.InputTokens, w.OutputTokens}[meter]
}

// specs lists r's buckets in the order they are checked.
func refSpecs(r llmrate.AdmitRequest) []refSpec {
	scope := func(s int) string {
		if s == 0 && !r.Solo {
			return "k"
		}
		return "w"
	}
	pm := func(s int, l llmrate.Limits, req bool) refSpec {
		sp := refSpec{id: scope(s) + "|" + r.Model + "|pm", period: 60_000_000, scope: -1, window: time.Minute}
		if req {
			sp.id += "r"
			sp.rate, sp.need, sp.take, sp.code = l.RequestsPerMinute, 1, 1, meterBuckets[s][0]
		} else {
			sp.id += "t"
			sp.rate, sp.need, sp.take, sp.code = l.TokensPerMinute, r.Tokens, r.Tokens, meterBuckets[s][1]
		}
		sp.cap = 2 * sp.rate
		return sp
	}
	out := []refSpec{pm(0, r.KeyLimits, true), pm(0, r.KeyLimits, false), pm(1, r.WorkspaceLimits, true), pm(1, r.WorkspaceLimits, false)}
	win := func(s int, ws []llmrate.Window) {
		for i, w := range ws {
			for m := range 4 {
				f := figureOf(w, m)
				if f == 0 {
					continue
				}
				sp := refSpec{id: fmt.Sprintf("%s|%s|%d|%d", scope(s), r.Model, m, w.Per), rate: f, cap: f, period: w.Per.Microseconds(),
					code: meterBuckets[s][m], window: w.Per, scope: s, index: i, meter: m}
				sp.need, sp.take = [4]int64{1, r.Tokens, r.InputTokens, 1}[m], [4]int64{1, r.Tokens, r.InputTokens, 0}[m]
				out = append(out, sp)
			}
		}
	}
	if r.Solo {
		win(0, r.WorkspaceLimits.Windows)
	} else {
		win(0, r.KeyLimits.Windows)
		win(1, r.WorkspaceLimits.Windows)
	}
	return out
}

// admit decides r at now (µs) as §2, §15 and §18 say, with the
// request's reserve (DESIGN §19, the Store contract's Reserve): each bucket
// must hold its need plus its floor, the first that does not refuses
// (ByReserve when it held the need itself), every wait is until the need
// plus the floor, a need plus floor above the capacity never fits, and a
// request with a reserve is never granted a reservation (MaxWait).
func (m *refModel) admit(r llmrate.AdmitRequest, now int64) llmrate.Decision {
	specs := refSpecs(r)
	if r.Solo {
		specs[0].rate, specs[0].cap, specs[1].rate, specs[1].cap = specs[2].rate, specs[2].cap, specs[3].rate, specs[3].cap
	}
	bs := make([]*refBucket, len(specs))
	for i, s := range specs {
		if r.Solo && (i == 0 || i == 1) {
			continue
		}
		bs[i] = m.at(s, now)
	}
	if r.Solo {
		bs[0], bs[1] = bs[2], bs[3]
	}
	floored := make([]refSpec, len(specs))
	for i, s := range specs {
		floored[i] = s
		floored[i].need += refFloor(r.Reserve, s.cap)
	}
	var d llmrate.Decision
	first := -1
	for i, s := range floored {
		if bs[i].level < s.need {
			first = i
			break
		}
	}
	if first >= 0 {
		var longest, capped int64
		never := false
		for i, s := range floored {
			var w int64
			if s.need > s.cap {
				never, w = true, 1<<62
			} else {
				w = waitUS(bs[i], s)
			}
			longest = max(longest, w)
			capped = max(capped, min(w, max(int64(60_000_000), s.period)))
		}
		// A reserve never waits: a reservation is debited now, below the floor.
		if r.MaxWait > 0 && r.Reserve == 0 && !never && longest <= r.MaxWait.Microseconds() {
			d.Wait = time.Duration(longest) * time.Microsecond
			first = -1
		} else {
			d.Refused, d.Window, d.NeverFits = specs[first].code, specs[first].window, never
			d.RetryAfter = time.Duration(capped) * time.Microsecond
			d.ByReserve = bs[first].level >= specs[first].need
		}
	}
	if first < 0 {
		d.Allowed = true
		for i, s := range specs {
			if r.Solo && (i == 0 || i == 1) {
				continue
			}
			bs[i].level -= s.take
		}
	}
	d.Remaining = [4]int64{bs[0].level, bs[1].level, bs[2].level, bs[3].level}
	if n := len(r.KeyLimits.Windows); n > 0 {
		d.KeyWindows = make([]llmrate.WindowLevels, n)
	}
	if n := len(r.WorkspaceLimits.Windows); n > 0 {
		d.WorkspaceWindows = make([]llmrate.WindowLevels, n)
	}
	for i, s := range specs {
		if s.scope < 0 {
			continue
		}
		targets := []*[]llmrate.WindowLevels{&d.KeyWindows, &d.WorkspaceWindows}[s.scope : s.scope+1]
		if r.Solo {
			targets = []*[]llmrate.WindowLevels{&d.KeyWindows, &d.WorkspaceWindows}
		}
		for _, t := range targets {
			l := &(*t)[s.index]
			*[4]*int64{&l.Requests, &l.Tokens, &l.InputTokens, &l.OutputTokens}[s.meter] = bs[i].level
		}
	}
	return d
}

// refFloor is a reserve's floor in a bucket of capacity c, from the
// contract's words with big.Int: ⌈r × c / 1,000,000⌉.
func refFloor(r, c int64) int64 {
	if r <= 0 {
		return 0
	}
	p := new(big.Int).Mul(big.NewInt(r), big.NewInt(c))
	q, m := new(big.Int).QuoRem(p, big.NewInt(1_000_000), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// reconcile applies rec at now: each tokens-like bucket's level less its
// bounded charge less what admission debited, floored at minus twice its
// capacity by a debit, capped at its capacity; a refund credits what
// admission debited. rec carries its admission's figures, maybe changed
// since: a window bucket is refilled, capped and floored at the figure of
// its latest admission (a new one: full at rec's), never at rec's.
func (m *refModel) reconcile(r llmrate.AdmitRequest, rec llmrate.ReconcileRequest, now int64) {
	for i, s := range refSpecs(r) {
		if r.Solo && (i == 0 || i == 1) {
			continue
		}
		meter := s.meter
		if s.scope < 0 {
			meter = i % 2
		}
		var delta int64
		bound := func(a int64) int64 { return min(a, 2*s.cap) }
		switch {
		case rec.Refund:
			delta = -[4]int64{1, rec.Estimate, rec.InputEstimate, 0}[meter]
		case meter == 0:
		case meter == 1:
			delta = bound(rec.Actual) - rec.Estimate
		case meter == 2:
			delta = bound(rec.InputActual) - rec.InputEstimate
		default:
			delta = bound(rec.OutputActual)
		}
		if delta == 0 && s.scope >= 0 {
			continue // a window bucket with nothing to charge is left alone
		}
		if s.scope >= 0 {
			if b := m.b[s.id]; b != nil && b.seen {
				own := s
				own.rate, own.cap = b.fig, b.fig
				if c := *b; refill(&c, own, now).level >= b.fig {
					// Forgotten: full again at rec's figure.
					*b = refBucket{seen: true, last: max(b.last, now), level: s.cap, frac: new(big.Rat), fig: s.rate}
				} else {
					s = own
				}
			}
		}
		b := m.at(s, now) // a per-minute entry (both its buckets) moves to now
		l := b.level - delta
		if delta > 0 && l < -2*s.cap {
			l = -2 * s.cap
		}
		if l >= s.cap {
			l, b.frac = s.cap, new(big.Rat)
		}
		b.level = l
	}
}

// TestWindowsMatchReference: random admissions, reservations, reconciles
// and refunds with random windows (every meter, windows from a second to
// 744 h, figures up to 10^12), clock steps forwards and backwards and
// figure changes, decided by Redis exactly as by an independent big.Rat
// model: every Decision field, window levels included.
func TestWindowsMatchReference(t *testing.T) {
	srv := redistest.Start(t)
	// One connection: no hedge is ever sent (it would need a second), so
	// no late duplicate of a refused admission can land after the next
	// step on a loaded machine and spend what the model still holds (the
	// narrow race the package doc describes after hedging).
	c := redisrig.NewClient(t, &redis.Options{Addr: srv.Addr, PoolSize: 1, MaxRetries: -1})
	var now time.Time
	rs := redisrig.Store(t, c, redisstore.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	pers := []time.Duration{time.Second, time.Minute, 90500 * time.Millisecond, time.Hour, 24 * time.Hour, 744 * time.Hour}
	steps, refused, windowRefusals, reservations := 0, 0, 0, 0
	byBucket := map[string]int{}
	for seed := uint64(1); seed <= 120; seed++ {
		rng := rand.New(rand.NewPCG(seed, 18))
		ref := &refModel{b: map[string]*refBucket{}}
		now = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		// A window's figure: unlimited, small, about the per-minute
		// figures' scale times a few, or near 10^12.
		fig := func(scale int64) int64 {
			switch rng.IntN(8) {
			case 0, 1, 2:
				return 0
			case 3:
				return 1 + scale/2 + rng.Int64N(scale)
			case 4, 5:
				return scale + rng.Int64N(20*scale)
			}
			return llmrate.MaxPerMinute - rng.Int64N(1_000_000)
		}
		windows := func(rpm, tpm int64) []llmrate.Window {
			var ws []llmrate.Window
			for _, i := range rng.Perm(len(pers))[:rng.IntN(3)] {
				w := llmrate.Window{Per: pers[i], Requests: fig(rpm), Tokens: fig(tpm), InputTokens: fig(tpm), OutputTokens: fig(tpm)}
				if w.Requests+w.Tokens+w.InputTokens+w.OutputTokens == 0 {
					w.Requests = 3
				}
				ws = append(ws, w)
			}
			return ws
		}
		limits := func() llmrate.Limits {
			rpm, tpm := 1+rng.Int64N(20), 1+rng.Int64N(5000)
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
		if len(kl.Windows)+len(wl.Windows) == 0 {
			kl.Windows = []llmrate.Window{{Per: 24 * time.Hour, Requests: 5}}
			if solo {
				wl = kl
			}
		}
		type pendingRec struct {
			req llmrate.AdmitRequest
			rec llmrate.ReconcileRequest
		}
		var pending []pendingRec
		for step := range 30 {
			steps++
			switch x := rng.IntN(12); {
			case x < 5:
				now = now.Add(time.Duration(rng.Int64N(90_000_000)) * time.Microsecond)
			case x == 4: // up to three days
				now = now.Add(time.Duration(rng.Int64N(3*86_400_000_000)) * time.Microsecond)
			case x == 7: // up to an hour
				now = now.Add(time.Duration(rng.Int64N(3_600_000_000)) * time.Microsecond)
			case x == 5:
				now = now.Add(-time.Duration(rng.Int64N(5_000_000)) * time.Microsecond)
			case x == 6: // new figures, the same windows' Per: levels clamped
				for i := range kl.Windows {
					kl.Windows[i].Tokens = fig(kl.TokensPerMinute)
				}
				kl.RequestsPerMinute = 1 + rng.Int64N(20)
				if solo {
					wl = kl
				}
			}
			tpm := min(kl.TokensPerMinute, wl.TokensPerMinute)
			req := llmrate.AdmitRequest{Key: key, Workspace: ws, Model: []string{"", "gpt-4o*"}[rng.IntN(2)], KeyLimits: kl, WorkspaceLimits: wl,
				Tokens: 1 + rng.Int64N(tpm), InputTokens: rng.Int64N(tpm), Solo: solo, ID: llmrate.NewAdmissionID()}
			if rng.IntN(8) == 0 { // now and then past the capacities
				req.Tokens, req.InputTokens = 1+rng.Int64N(3*tpm), rng.Int64N(30*tpm)
			}
			if rng.IntN(2) == 0 {
				req.MaxWait = time.Duration(rng.Int64N(30_000_000)) * time.Microsecond
			}
			want := ref.admit(req, now.UnixMicro())
			got, err := rs.Admit(ctx, req)
			require.NoError(t, err)
			require.Equal(t, want, got, "seed %d step %d: %+v", seed, step, req)
			if !got.Allowed {
				byBucket[fmt.Sprint(got.Refused, got.Window, got.NeverFits)]++
				refused++
				if got.Window != time.Minute {
					windowRefusals++
				}
				continue
			}
			if got.Wait > 0 {
				reservations++
			}
			if rng.IntN(4) == 0 {
				continue
			}
			rec := llmrate.ReconcileRequest{Key: key, Workspace: ws, Model: req.Model, KeyLimits: kl, WorkspaceLimits: wl, Solo: solo, ID: req.ID,
				Estimate: req.Tokens, Actual: rng.Int64N(6 * tpm), InputEstimate: req.InputTokens, InputActual: rng.Int64N(6 * tpm),
				OutputActual: rng.Int64N(6 * tpm), Refund: rng.IntN(6) == 0}
			if rng.IntN(5) == 0 {
				rec.Actual, rec.InputActual, rec.OutputActual = 1<<40, 1<<40, 1<<40
			}
			// Reconciles land later, in any order, several admissions in
			// flight at once (so debts stack up to their floor).
			pending = append(pending, pendingRec{req, rec})
			for len(pending) > 0 && rng.IntN(3) != 0 {
				i := rng.IntN(len(pending))
				p := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				ref.reconcile(p.req, p.rec, now.UnixMicro())
				require.NoError(t, rs.Reconcile(ctx, p.rec))
				require.NoError(t, rs.Reconcile(ctx, p.rec)) // a repeat: not applied again
			}
		}
	}
	t.Logf("refusals: %v", byBucket)
	t.Logf("%d steps: %d refused (%d by a window), %d reservations", steps, refused, windowRefusals, reservations)
	require.Greater(t, windowRefusals, steps/10)
	require.Greater(t, refused, steps/5)
	require.Less(t, refused, steps*7/10)
	require.Greater(t, reservations, steps/300)
}
