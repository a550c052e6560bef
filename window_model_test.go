package llmrate_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/require"
)

// The windows' reference model: every bucket (the four per-minute ones and
// each window meter's) is an exact rational level with its own capacity
// and period, refilled lazily on touch. It shares no code with llmrate:
// the charges and bounds are written out from DESIGN §4, §5 and §18, and
// a priority reserve's floors from §19 (⌈r × capacity⌉, in big integers).

type wBucket struct {
	level  *big.Rat
	fig    int64 // the figure of its latest admission: the rate per period
	cap    int64
	period time.Duration
	last   time.Time // a window bucket's own clock
}

// refillTo refills a window bucket up to now at its figure, on its own
// clock (backwards: nothing).
func (b *wBucket) refillTo(now time.Time) {
	dt := now.Sub(b.last)
	if dt > 0 {
		b.last = now
	} else {
		dt = 0
	}
	b.refill(dt)
}

// refill adds fig×dt/period, capped at cap (a bucket at or above cap is
// clamped to it).
func (b *wBucket) refill(dt time.Duration) {
	c := rat(b.cap)
	if b.level.Cmp(c) >= 0 {
		b.level = c
		return
	}
	add := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(b.fig), big.NewInt(int64(dt))), big.NewInt(int64(b.period)))
	l := new(big.Rat).Add(b.level, add)
	if l.Cmp(c) > 0 {
		l = c
	}
	b.level = l
}

// floor is the whole part of the level (rounded down).
func floorRat(r *big.Rat) int64 {
	q, _ := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	return q.Int64()
}

// waitNS is the exact wait in nanoseconds, rounded up, until b holds need.
func (b *wBucket) waitNS(need int64) *big.Int {
	deficit := new(big.Rat).Sub(rat(need), b.level)
	if deficit.Sign() <= 0 {
		return new(big.Int)
	}
	ns := new(big.Rat).Quo(new(big.Rat).Mul(deficit, rat(int64(b.period))), rat(b.fig))
	q := new(big.Int).Quo(ns.Num(), ns.Denom())
	if new(big.Rat).SetInt(q).Cmp(ns) < 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// adjust subtracts delta from the level: capped at cap; a debit beyond
// -2×cap is floored there, keeping the level's fraction (the store keeps
// it: the floor bounds whole units).
func (b *wBucket) adjust(delta int64) {
	l := new(big.Rat).Sub(b.level, rat(delta))
	if delta > 0 && floorRat(l) < -2*b.cap {
		l.Add(l, rat(-2*b.cap-floorRat(l)))
	}
	if l.Cmp(rat(b.cap)) > 0 {
		l = rat(b.cap)
	}
	b.level = l
}

type wKey struct {
	meter int // 0 requests, 1 tokens, 2 input, 3 output; -1/-2 the per-minute requests/tokens
	per   time.Duration
}

type wScope struct {
	b     map[wKey]*wBucket
	last  time.Time
	seen  bool
	wlast time.Time // the windows' clock: they are touched only by requests with windows
	wseen bool
}

type wModel struct{ scopes map[string]*wScope }

func figureOf(w llmrate.Window, m int) int64 {
	return [4]int64{w.Requests, w.Tokens, w.InputTokens, w.OutputTokens}[m]
}

// touch refills the buckets of a scope to now (backwards: nothing) under
// lim: the per-minute ones and, for an admission (admit) with windows (on
// either side), the windows' at their figures now; a window bucket not in
// lim's windows, or every one for a reconcile, is left as it is, its clock
// too. A window bucket that time alone has refilled at its own figure is
// forgotten (full again at the figure of whoever finds it next).
// Each window bucket keeps its own clock, from its creation at the
// windows' clock (the latest reading seen by requests with windows).
func (m *wModel) touch(id string, now time.Time, lim llmrate.Limits, windows, admit bool) *wScope {
	s := m.scopes[id]
	if s == nil {
		s = &wScope{b: map[wKey]*wBucket{}}
		m.scopes[id] = s
	}
	dt := time.Duration(0)
	if !s.seen {
		s.seen, s.last = true, now
	} else if d := now.Sub(s.last); d > 0 {
		dt, s.last = d, now
	}
	if windows {
		// The windows' clock starts at the scope's first request with
		// windows of its own, from the scope's clock.
		if !s.wseen && len(lim.Windows) > 0 {
			s.wseen, s.wlast = true, s.last
		} else if d := now.Sub(s.wlast); s.wseen && d > 0 {
			s.wlast = now
		}
	}
	cur := map[wKey]int64{{-1, time.Minute}: lim.RequestsPerMinute, {-2, time.Minute}: lim.TokensPerMinute}
	for _, w := range lim.Windows {
		for mt := range 4 {
			if f := figureOf(w, mt); f > 0 {
				cur[wKey{mt, w.Per}] = f
			}
		}
	}
	for k, b := range s.b {
		if k.meter < 0 {
			f := cur[k]
			b.fig, b.cap = f, 2*f
			b.refill(dt)
			continue
		}
		if !windows {
			continue // a request without windows leaves them alone
		}
		c := *b
		c.refillTo(now)
		full := c.level.Cmp(rat(c.cap)) >= 0 // time alone refilled it at its own figure: forgotten
		if f, ok := cur[k]; ok && admit {
			if full {
				*b = wBucket{level: rat(f), fig: f, cap: f, period: k.per, last: c.last}
				continue
			}
			b.fig, b.cap = f, f
			b.refillTo(now)
			continue
		}
		if full {
			delete(s.b, k)
		}
	}
	for k, f := range cur {
		if s.b[k] == nil && (k.meter < 0 || admit) {
			c := f
			if k.meter < 0 {
				c = 2 * f
			}
			s.b[k] = &wBucket{level: rat(c), fig: f, cap: c, period: k.per, last: s.wlast}
		}
	}
	return s
}

type wStage struct {
	b           *wBucket
	need, debit int64
	bucket      llmrate.Bucket
	levels      *llmrate.WindowLevels
}

type wReq struct {
	reserve            int64 // millionths (AdmitRequest.Reserve)
	key, ws            string
	kl, wl             llmrate.Limits
	solo               bool
	tokens, input      int64
	maxWait            time.Duration
	now                time.Time
	est, inEst         int64 // for a reconcile: what admission debited
	act, inAct, outAct int64
	refund             bool
}

func (m *wModel) scopes2(r wReq, admit bool) (*wScope, *wScope) {
	windows := len(r.kl.Windows)+len(r.wl.Windows) > 0
	if r.solo {
		s := m.touch("w/"+r.ws, r.now, r.wl, windows, admit)
		return s, nil
	}
	return m.touch("k/"+r.ws+"/"+r.key, r.now, r.kl, windows, admit), m.touch("w/"+r.ws, r.now, r.wl, windows, admit)
}

func (m *wModel) admit(r wReq) llmrate.Decision {
	ks, ws := m.scopes2(r, true)
	var st []wStage
	st = append(st, wStage{b: ks.b[wKey{-1, time.Minute}], need: 1, debit: 1, bucket: llmrate.KeyRequests},
		wStage{b: ks.b[wKey{-2, time.Minute}], need: r.tokens, debit: r.tokens, bucket: llmrate.KeyTokens})
	if ws != nil {
		st = append(st, wStage{b: ws.b[wKey{-1, time.Minute}], need: 1, debit: 1, bucket: llmrate.WorkspaceRequests},
			wStage{b: ws.b[wKey{-2, time.Minute}], need: r.tokens, debit: r.tokens, bucket: llmrate.WorkspaceTokens})
	}
	var d llmrate.Decision
	wins := func(s *wScope, lim llmrate.Limits, names [4]llmrate.Bucket) []llmrate.WindowLevels {
		if len(lim.Windows) == 0 {
			return nil
		}
		lv := make([]llmrate.WindowLevels, len(lim.Windows))
		for i, w := range lim.Windows {
			for mt := range 4 {
				if figureOf(w, mt) == 0 {
					continue
				}
				need := [4]int64{1, r.tokens, r.input, 1}[mt]
				debit := [4]int64{1, r.tokens, r.input, 0}[mt]
				st = append(st, wStage{b: s.b[wKey{mt, w.Per}], need: need, debit: debit, bucket: names[mt], levels: &lv[i]})
			}
		}
		return lv
	}
	d.KeyWindows = wins(ks, r.kl, [4]llmrate.Bucket{llmrate.KeyRequests, llmrate.KeyTokens, llmrate.KeyInputTokens, llmrate.KeyOutputTokens})
	if ws != nil {
		d.WorkspaceWindows = wins(ws, r.wl, [4]llmrate.Bucket{llmrate.WorkspaceRequests, llmrate.WorkspaceTokens, llmrate.WorkspaceInputTokens, llmrate.WorkspaceOutputTokens})
	} else {
		d.WorkspaceWindows = d.KeyWindows
	}
	// A reserve's floor in each bucket: ⌈reserve × capacity / 10^6⌉.
	floor := func(s wStage) int64 {
		f := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(r.reserve), big.NewInt(s.b.cap)), big.NewInt(1_000_000))
		q := floorRat(f)
		if new(big.Rat).SetInt64(q).Cmp(f) < 0 {
			q++
		}
		return q
	}
	refused := -1
	for i, s := range st {
		if s.b.level.Cmp(rat(s.need+floor(s))) < 0 {
			refused = i
			break
		}
	}
	debit := func() {
		for _, s := range st {
			s.b.level = new(big.Rat).Sub(s.b.level, rat(s.debit))
		}
	}
	if refused < 0 {
		debit()
		d.Allowed = true
	} else {
		d.Refused, d.Window = st[refused].bucket, st[refused].b.period
		d.ByReserve = floor(st[refused]) > 0 && st[refused].b.level.Cmp(rat(st[refused].need)) >= 0
		exact := new(big.Int)
		for _, s := range st {
			c := max(time.Minute, s.b.period)
			w := s.b.waitNS(s.need + floor(s))
			if s.need+floor(s) > s.b.cap {
				d.NeverFits = true
				w = big.NewInt(int64(c) + 1)
			}
			if w.Cmp(exact) > 0 {
				exact = w
			}
			capped := c
			if w.Cmp(big.NewInt(int64(c))) < 0 {
				capped = time.Duration(w.Int64())
			}
			d.RetryAfter = max(d.RetryAfter, capped)
		}
		// A reserve never waits: a reservation is debited now, below the floor.
		if r.maxWait > 0 && r.reserve == 0 && !d.NeverFits && exact.Cmp(big.NewInt(int64(r.maxWait))) <= 0 {
			debit()
			d.Allowed, d.Refused, d.Window, d.Wait, d.RetryAfter, d.ByReserve = true, 0, 0, time.Duration(exact.Int64()), 0, false
		}
	}
	if len(r.kl.Windows)+len(r.wl.Windows) == 0 && r.reserve == 0 {
		// Without windows a store may leave it 0 (the limiter reads a
		// minute): the memory store's fast path does; a request with a
		// reserve is decided on the staged path, which names its minute.
		d.Window = 0
	}
	lv := func(s *wScope, k wKey) int64 { return floorRat(s.b[k].level) }
	d.Remaining[0], d.Remaining[1] = lv(ks, wKey{-1, time.Minute}), lv(ks, wKey{-2, time.Minute})
	if ws != nil {
		d.Remaining[2], d.Remaining[3] = lv(ws, wKey{-1, time.Minute}), lv(ws, wKey{-2, time.Minute})
	} else {
		d.Remaining[2], d.Remaining[3] = d.Remaining[0], d.Remaining[1]
	}
	for _, s := range st {
		if s.levels != nil {
			setLevel(s.levels, s.bucket, floorRat(s.b.level))
		}
	}
	return d
}

func setLevel(l *llmrate.WindowLevels, b llmrate.Bucket, v int64) {
	switch b {
	case llmrate.KeyRequests, llmrate.WorkspaceRequests:
		l.Requests = v
	case llmrate.KeyTokens, llmrate.WorkspaceTokens:
		l.Tokens = v
	case llmrate.KeyInputTokens, llmrate.WorkspaceInputTokens:
		l.InputTokens = v
	default:
		l.OutputTokens = v
	}
}

func bound(v, f int64) int64 { return min(max(v, 0), 2*f) }

// reconcile applies r, which carries its admission's figures (maybe
// changed since): a window bucket with something to charge is refilled to
// now at its own figure (its latest admission's), created full at r's if
// absent, and takes the charge, capped at its own capacity and floored at
// minus twice it; one with nothing to charge is left alone.
func (m *wModel) reconcile(r wReq) {
	ks, ws := m.scopes2(r, false)
	apply := func(s *wScope, lim llmrate.Limits) {
		tok := s.b[wKey{-2, time.Minute}]
		if r.refund {
			s.b[wKey{-1, time.Minute}].adjust(-1)
			tok.adjust(-r.est)
		} else {
			tok.adjust(bound(r.act, tok.cap) - r.est)
		}
		for _, w := range lim.Windows {
			for mt := range 4 {
				f := figureOf(w, mt)
				if f == 0 {
					continue
				}
				var delta int64
				switch {
				case r.refund:
					delta = [4]int64{-1, -r.est, -r.inEst, 0}[mt]
				case mt == 1:
					delta = bound(r.act, f) - r.est
				case mt == 2:
					delta = bound(r.inAct, f) - r.inEst
				case mt == 3:
					delta = bound(r.outAct, f)
				}
				if delta == 0 {
					continue
				}
				b := s.b[wKey{mt, w.Per}]
				if b == nil {
					b = &wBucket{level: rat(f), fig: f, cap: f, period: w.Per, last: s.wlast}
					s.b[wKey{mt, w.Per}] = b
				}
				b.refillTo(r.now)
				b.adjust(delta)
			}
		}
	}
	apply(ks, r.kl)
	if ws != nil {
		apply(ws, r.wl)
	}
}

// TestWindowsModelBased runs seeded random sequences of clock moves (up to
// days), admissions (with input estimates and reservations), reconciles
// and refunds (absurd reports included), and figure changes (windows
// added, dropped, resized, their Per changed) against the memory store
// and the reference: every decision (refusing bucket, window, exact
// Retry-After and reservation wait, never-fits, refused by a reserve) and
// every level (per-minute and each window meter's) must match. A third of
// the admissions carry a priority reserve (AdmitRequest.Reserve), with or
// without windows. Odd seeds are Solo.
func TestWindowsModelBased(t *testing.T) {
	t.Parallel()
	seeds, first := 400, uint64(0)
	if raceEnabled {
		seeds = 60 // ten times slower under the race detector; the full pass runs without it
	}
	if s := strings.TrimSpace(getenv("LLMRATE_MODEL_SEED")); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		first, seeds = v, 1
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		if err := runWindowSequence(seed); err != nil {
			t.Fatalf("seed %d: %v (replay: LLMRATE_MODEL_SEED=%d go test -run TestWindowsModelBased)", seed, err, seed)
		}
	}
}

func runWindowSequence(seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0x18))
	solo := seed%2 == 1
	pers := []time.Duration{time.Second, 1500 * time.Millisecond, time.Minute, time.Hour, 24 * time.Hour, 6 * time.Hour}
	limits := func() llmrate.Limits {
		l := llmrate.Limits{RequestsPerMinute: 1 + r.Int64N(20), TokensPerMinute: 1 + r.Int64N(3000)}
		for _, i := range r.Perm(len(pers))[:r.IntN(4)] {
			w := llmrate.Window{Per: pers[i]}
			for w == (llmrate.Window{Per: pers[i]}) {
				if r.IntN(2) == 0 {
					w.Requests = 1 + r.Int64N(40)
				}
				if r.IntN(3) == 0 {
					w.Tokens = 1 + r.Int64N(8000)
				}
				if r.IntN(2) == 0 {
					w.InputTokens = 1 + r.Int64N(4000)
				}
				if r.IntN(2) == 0 {
					w.OutputTokens = 1 + r.Int64N(2000)
				}
			}
			l.Windows = append(l.Windows, w)
		}
		return l
	}
	keys := [][2]string{{"k1", "A"}, {"k2", "A"}, {"k3", "B"}}
	if solo {
		keys = [][2]string{{"k1", "k1"}, {"k2", "k2"}}
	}
	figs := map[string]llmrate.Limits{}
	for _, kw := range keys {
		figs[kw[0]], figs[kw[1]] = limits(), limits()
		if solo {
			figs[kw[0]] = figs[kw[1]]
		}
	}
	store := llmrate.NewMemoryStore()
	m := &wModel{scopes: map[string]*wScope{}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	type adm struct {
		req wReq
	}
	var admitted []adm
	for step := range 120 {
		switch op := r.IntN(12); {
		case op < 3:
			d := time.Duration(r.Int64N(int64(40 * time.Second)))
			switch r.IntN(10) {
			case 0:
				d = -d / 3
			case 1:
				d = time.Duration(r.Int64N(int64(30 * time.Hour)))
			case 2:
				d = time.Duration(r.Int64N(int64(2 * time.Hour)))
			}
			now = now.Add(d)
		case op < 4:
			kw := keys[r.IntN(len(keys))]
			name := kw[r.IntN(2)]
			figs[name] = limits()
			if solo {
				figs[kw[0]], figs[kw[1]] = figs[name], figs[name]
			}
		case op < 6 && len(admitted) > 0:
			i := r.IntN(len(admitted))
			a := admitted[i].req
			admitted = append(admitted[:i], admitted[i+1:]...)
			a.now, a.kl, a.wl = now, figs[a.key], figs[a.ws]
			a.act, a.inAct, a.outAct = r.Int64N(6000), r.Int64N(4000), r.Int64N(3000)
			if r.IntN(15) == 0 {
				a.act, a.inAct, a.outAct = r.Int64N(1<<40), r.Int64N(1<<40), r.Int64N(1<<40)
			}
			a.refund = r.IntN(6) == 0
			err := store.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: a.key, Workspace: a.ws, KeyLimits: a.kl, WorkspaceLimits: a.wl,
				Solo: a.solo, Now: now, Estimate: a.est, Actual: a.act, InputEstimate: a.inEst, InputActual: a.inAct, OutputActual: a.outAct, Refund: a.refund})
			if err != nil {
				return err
			}
			m.reconcile(a)
		default:
			kw := keys[r.IntN(len(keys))]
			q := wReq{key: kw[0], ws: kw[1], kl: figs[kw[0]], wl: figs[kw[1]], solo: solo, now: now,
				tokens: 1 + r.Int64N(2500)}
			q.input = r.Int64N(q.tokens + 1)
			if r.IntN(4) == 0 {
				q.maxWait = time.Duration(r.Int64N(int64(time.Minute)))
			}
			if r.IntN(3) == 0 {
				q.reserve = []int64{1, 333_333, 500_000, 999_999, 1 + r.Int64N(999_999)}[r.IntN(5)]
			}
			got, err := store.Admit(context.Background(), llmrate.AdmitRequest{Key: q.key, Workspace: q.ws, KeyLimits: q.kl, WorkspaceLimits: q.wl,
				Solo: solo, Now: now, Tokens: q.tokens, InputTokens: q.input, MaxWait: q.maxWait, Reserve: q.reserve})
			if err != nil {
				return err
			}
			want := m.admit(q)
			if s1, s2 := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); s1 != s2 {
				return fmt.Errorf("step %d (%s/%s, %d tokens, %d input, max wait %v, reserve %d, key %+v):\n store %s\n model %s", step, q.ws, q.key, q.tokens, q.input, q.maxWait, q.reserve, q.kl, s1, s2)
			}
			if got.Allowed {
				q.est, q.inEst = q.tokens, q.input
				admitted = append(admitted, adm{req: q})
			}
		}
	}
	return nil
}
