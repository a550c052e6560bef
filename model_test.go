package llmrate_test

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/require"
)

// The reference model: every bucket level is an exact rational, refilled
// lazily on touch at its per-minute figure, capped at twice it. It is
// written for clarity, not speed, and shares no code with llmrate.

type modelBucket struct{ level *big.Rat }

type modelEntry struct {
	req, tok modelBucket
	last     time.Time
	seen     bool
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// touch refills both buckets up to now under lim (backwards: nothing).
func (e *modelEntry) touch(now time.Time, lim llmrate.Limits) {
	if !e.seen {
		e.seen, e.last = true, now
		e.req.level, e.tok.level = rat(2*lim.RequestsPerMinute), rat(2*lim.TokensPerMinute)
		return
	}
	dt := now.Sub(e.last)
	if dt < 0 {
		dt = 0
	} else {
		e.last = now
	}
	for _, b := range []struct {
		b    *modelBucket
		rate int64
	}{{&e.req, lim.RequestsPerMinute}, {&e.tok, lim.TokensPerMinute}} {
		capacity := rat(2 * b.rate)
		add := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(b.rate), big.NewInt(int64(dt))), big.NewInt(int64(time.Minute)))
		l := new(big.Rat).Add(b.b.level, add)
		if b.b.level.Cmp(capacity) >= 0 || l.Cmp(capacity) > 0 {
			l = capacity
		}
		b.b.level = l
	}
}

// waitSeconds is the exact whole seconds until level reaches need at rate
// per minute (0 if it already has).
func waitSeconds(level *big.Rat, need, rate int64) int64 {
	deficit := new(big.Rat).Sub(rat(need), level)
	if deficit.Sign() <= 0 {
		return 0
	}
	secs := new(big.Rat).Quo(new(big.Rat).Mul(deficit, rat(60)), rat(rate))
	q := new(big.Int).Quo(secs.Num(), secs.Denom())
	if new(big.Rat).SetInt(q).Cmp(secs) < 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > 1<<40 {
		return 1 << 40
	}
	return q.Int64()
}

type model struct {
	tiers   llmrate.TierTable
	tierOf  map[string]llmrate.Tier
	keys    map[string]*modelEntry // "ws/key/entry"
	ws      map[string]*modelEntry // "ws/entry"
	entries func(key, ws, entry string) (*modelEntry, *modelEntry)
	// Policies: model limits by entry name, and overrides by workspace.
	models llmrate.ModelLimits
	over   map[string]llmrate.Limits
}

func newModel(tt llmrate.TierTable) *model {
	m := &model{tiers: tt, tierOf: map[string]llmrate.Tier{}, keys: map[string]*modelEntry{}, ws: map[string]*modelEntry{}, over: map[string]llmrate.Limits{}}
	m.entries = func(key, ws, entry string) (*modelEntry, *modelEntry) {
		k, w := ws+"/"+key+"/"+entry, ws+"/"+entry
		if m.keys[k] == nil {
			m.keys[k] = &modelEntry{}
		}
		if m.ws[w] == nil {
			m.ws[w] = &modelEntry{}
		}
		return m.keys[k], m.ws[w]
	}
	return m
}

// entryOf is the model-limits entry a model falls under: the exact name,
// else the entry ending in "*" with the longest matching prefix.
func (m *model) entryOf(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	if _, ok := m.models[name]; ok {
		return name, true
	}
	best, found := "", false
	for e := range m.models {
		if p, ok := strings.CutSuffix(e, "*"); ok && strings.HasPrefix(name, p) && (!found || len(e) > len(best)) {
			best, found = e, true
		}
	}
	return best, found
}

// limits returns the entry and the figures a request is held to; failOpen
// is true when an invalid override lets it through unchecked.
func (m *model) limits(ws, name string) (entry string, lim llmrate.Limits, failOpen bool) {
	tier := m.tierOf[ws]
	// An override is the workspace's figures in force: an entry's request
	// is held to its windows and gauge too, so an invalid one fails every
	// request of the workspace open, on an entry or not.
	o, overridden := m.over[ws]
	bad := func(v int64) bool { return v < 1 || v > 1_000_000_000_000 }
	if overridden && (bad(o.RequestsPerMinute) || bad(o.TokensPerMinute)) {
		return "", llmrate.Limits{}, true
	}
	if e, ok := m.entryOf(name); ok {
		return e, m.models[e].For(tier), false
	}
	if overridden {
		return "", o, false
	}
	return "", m.tiers.For(tier), false
}

// admit returns whether the request is admitted, and if not its Retry-After.
func (m *model) admit(key, ws, name string, est int64, now time.Time) (bool, int64) {
	entry, lim, _ := m.limits(ws, name)
	ke, we := m.entries(key, ws, entry)
	ke.touch(now, lim)
	we.touch(now, lim)
	type stage struct {
		b    *modelBucket
		need int64
		rate int64
	}
	stages := []stage{{&ke.req, 1, lim.RequestsPerMinute}, {&ke.tok, est, lim.TokensPerMinute}, {&we.req, 1, lim.RequestsPerMinute}, {&we.tok, est, lim.TokensPerMinute}}
	ok := true
	for _, s := range stages {
		if s.b.level.Cmp(rat(s.need)) < 0 {
			ok = false
		}
	}
	if ok {
		for _, s := range stages {
			s.b.level = new(big.Rat).Sub(s.b.level, rat(s.need))
		}
		return true, 0
	}
	var wait int64
	for _, s := range stages {
		if s.need > 2*s.rate {
			return false, 60
		}
		wait = max(wait, waitSeconds(s.b.level, s.need, s.rate))
	}
	return false, min(max(wait, 1), 60)
}

func (m *model) reconcile(key, ws, name string, est, actual int64, now time.Time) {
	entry, lim, _ := m.limits(ws, name)
	ke, we := m.entries(key, ws, entry)
	ke.touch(now, lim)
	we.touch(now, lim)
	for _, b := range []*modelBucket{&ke.tok, &we.tok} {
		capacity := 2 * lim.TokensPerMinute
		charge := min(actual, 2*capacity)
		l := new(big.Rat).Sub(b.level, rat(charge-est))
		if charge > est && l.Cmp(rat(-2*capacity)) < 0 {
			l = rat(-2 * capacity)
		}
		if l.Cmp(rat(capacity)) > 0 {
			l = rat(capacity)
		}
		b.level = l
	}
}

// TestModelBased runs seeded random sequences of clock moves, requests
// (with reported usage and response time, naming models with and without
// model-limits entries), tier switches and override changes (some invalid)
// against the real limiter and the reference model; every decision and
// Retry-After must match, and a request under an invalid override must
// pass unchecked and leave every bucket as it was. The same sequence runs
// through a shadow limiter too: its decisions must match the reference's
// (and so enforcement's) one by one while it refuses nothing. A failure names its seed: rerun with LLMRATE_MODEL_SEED=<seed>.
func TestModelBased(t *testing.T) {
	t.Parallel()
	seeds := 2000
	first := uint64(0)
	if s := strings.TrimSpace(getenv("LLMRATE_MODEL_SEED")); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		first, seeds = v, 1
	}
	var decisions atomic.Int64
	const parts = 4 // parallel subtests share the seeds
	t.Run("seeds", func(t *testing.T) {
		for p := range uint64(parts) {
			t.Run(strconv.FormatUint(p, 10), func(t *testing.T) {
				t.Parallel()
				for seed := first + p; seed < first+uint64(seeds); seed += parts {
					// Odd seeds run the default configuration (each key its
					// own workspace: Solo), even seeds two keys sharing one.
					if err := runModelSequence(seed, seed%2 == 1, &decisions); err != nil {
						t.Fatalf("seed %d: %v (replay: LLMRATE_MODEL_SEED=%d go test -run TestModelBased)", seed, err, seed)
					}
				}
			})
		}
	})
	t.Logf("%d sequences, %d decisions compared", seeds, decisions.Load())
}

func runModelSequence(seed uint64, solo bool, decisions *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, 0x11))
	small := func() llmrate.Limits {
		return llmrate.Limits{RequestsPerMinute: 1 + r.Int64N(30), TokensPerMinute: 1 + r.Int64N(2000)}
	}
	tt := llmrate.TierTable{Free: small(), Developer: small(), Team: small(), Growth: small(), Scale: small(), Enterprise: small()}
	m := newModel(tt)
	table := func() llmrate.TierTable {
		return llmrate.TierTable{Free: small(), Developer: small(), Team: small(), Growth: small(), Scale: small(), Enterprise: small()}
	}
	m.models = llmrate.ModelLimits{"gpt-4o": table(), "gpt-4o*": table(), "gpt*": table()}
	overrides := &overrideTable{}
	clock := newFakeClock()
	var tiers sync2Map
	res := llmrate.TierResolverFunc(func(_ context.Context, ws string) (llmrate.Tier, bool) { return tiers.get(ws) })
	provider := func(clock *fakeClock) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			d, _ := strconv.ParseInt(req.Header.Get("X-Delay"), 10, 64)
			clock.Advance(time.Duration(d)) // the response takes this long
			w.Header().Set("Content-Type", "application/json")
			if u := req.Header.Get("X-Usage"); u != "" {
				_, _ = fmt.Fprintf(w, `{"usage":{"prompt_tokens":%s,"completion_tokens":0}}`, u)
				return
			}
			_, _ = io.WriteString(w, `{}`)
		})
	}
	opts := []llmrate.Option{llmrate.WithTiers(tt), llmrate.WithTierResolver(res),
		llmrate.WithModel(modelHeaderExtractor), llmrate.WithModelLimits(m.models), llmrate.WithOverrides(overrides)}
	keys := [][2]string{{"k1", "k1"}, {"k2", "k2"}, {"k3", "k3"}}
	if !solo {
		opts = append(opts, llmrate.WithWorkspace(func(req *http.Request) (string, error) { return req.Header.Get("X-WS"), nil }))
		keys = [][2]string{{"k1", "A"}, {"k2", "A"}, {"k3", "B"}}
	}
	l, err := llmrate.New(append(opts, llmrate.WithClock(clock.Now))...)
	if err != nil {
		return err
	}
	h := l.Middleware(provider(clock))
	// The same sequence runs through a shadow limiter on its own clock: it
	// must decide exactly as the reference does, and refuse nothing.
	sclock, shadowed := newFakeClock(), &recorder{}
	ls, err := llmrate.New(append(opts, llmrate.WithClock(sclock.Now), llmrate.WithShadow(), llmrate.WithObserver(shadowed))...)
	if err != nil {
		return err
	}
	hs := ls.Middleware(provider(sclock))
	for step := range 60 {
		switch op := r.IntN(10); {
		case op < 2: // move the clock, sometimes backwards
			d := time.Duration(r.Int64N(int64(90 * time.Second)))
			if r.IntN(8) == 0 {
				d = -d / 4
			}
			if r.IntN(10) == 0 {
				d = time.Duration(r.Int64N(int64(10 * time.Minute)))
			}
			clock.Advance(d)
			sclock.Advance(d)
		case op < 3: // switch a workspace's tier
			ws := keys[r.IntN(len(keys))][1]
			t := llmrate.Tier(r.IntN(6))
			tiers.set(ws, t)
			m.tierOf[ws] = t
		case op < 4: // set, change or drop a workspace's override
			ws := keys[r.IntN(len(keys))][1]
			switch r.IntN(6) {
			case 0:
				overrides.del(ws)
				delete(m.over, ws)
			case 1: // invalid
				o := []llmrate.Limits{{RequestsPerMinute: 0, TokensPerMinute: 10}, {RequestsPerMinute: 5, TokensPerMinute: -2}, {RequestsPerMinute: 1_000_000_000_001, TokensPerMinute: 10}}[r.IntN(3)]
				overrides.set(ws, o)
				m.over[ws] = o
			default:
				o := small()
				overrides.set(ws, o)
				m.over[ws] = o
			}
		default: // a request
			kw := keys[r.IntN(len(keys))]
			name := []string{"", "gpt-4o", "gpt-4o-mini", "gpt-3.5-turbo", "claude-3"}[r.IntN(5)]
			cl := r.Int64N(4 * 3000)
			est := max(1, cl/4)
			usage := int64(-1)
			if r.IntN(3) > 0 {
				usage = r.Int64N(5000)
				if r.IntN(20) == 0 {
					usage = r.Int64N(1 << 40) // absurd: bounded
				}
			}
			delay := time.Duration(r.Int64N(int64(5 * time.Second)))
			now := clock.Now()
			_, _, failOpen := m.limits(kw[1], name)
			wantOK, wantRetry := true, int64(0)
			if !failOpen {
				wantOK, wantRetry = m.admit(kw[0], kw[1], name, est, now)
			}
			fails := l.FailOpens()
			newReq := func() *http.Request {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
				req.Header.Set("X-Model", name)
				req.ContentLength = cl
				req.Header.Set("Authorization", "Bearer "+kw[0])
				req.Header.Set("X-WS", kw[1])
				req.Header.Set("X-Delay", strconv.FormatInt(int64(delay), 10))
				if usage >= 0 {
					req.Header.Set("X-Usage", strconv.FormatInt(usage, 10))
				}
				return req
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newReq())
			decisions.Add(1)
			seen := len(shadowed.decisions)
			ws := httptest.NewRecorder()
			hs.ServeHTTP(ws, newReq())
			if ws.Code != http.StatusOK {
				return fmt.Errorf("step %d: shadow mode answered %d", step, ws.Code)
			}
			// A would-be refusal reached the provider, whose response took
			// time: keep the shadow clock on the enforcing one's.
			sclock.Advance(clock.Now().Sub(sclock.Now()))
			switch {
			case failOpen && len(shadowed.decisions) != seen:
				return fmt.Errorf("step %d: shadow mode decided under an invalid override", step)
			case !failOpen && len(shadowed.decisions) != seen+1:
				return fmt.Errorf("step %d: shadow mode made %d decisions", step, len(shadowed.decisions)-seen)
			case !failOpen:
				d := shadowed.decisions[seen]
				if d.Allowed != wantOK || !d.Allowed && d.RetryAfter != time.Duration(wantRetry)*time.Second {
					return fmt.Errorf("step %d: shadow decided %v (Retry-After %v), model says %v (%d s)", step, d.Allowed, d.RetryAfter, wantOK, wantRetry)
				}
			}
			gotOK := w.Code == http.StatusOK
			if gotOK != wantOK {
				return fmt.Errorf("step %d: %s/%s est %d: admitted=%v, model says %v", step, kw[1], kw[0], est, gotOK, wantOK)
			}
			if !gotOK {
				if got := w.Header().Get("Retry-After"); got != strconv.FormatInt(wantRetry, 10) {
					return fmt.Errorf("step %d: Retry-After %s, model says %d", step, got, wantRetry)
				}
				continue
			}
			if failOpen {
				if got := l.FailOpens() - fails; got != 1 {
					return fmt.Errorf("step %d: invalid override: %d fail-opens counted, want 1", step, got)
				}
				continue
			}
			if usage >= 0 && usage != est {
				m.reconcile(kw[0], kw[1], name, est, usage, now.Add(delay))
			}
		}
	}
	return nil
}

// sync2Map is a tiny concurrency-safe tier map for the resolver.
type sync2Map struct {
	m atomic.Pointer[map[string]llmrate.Tier]
}

func (s *sync2Map) get(ws string) (llmrate.Tier, bool) {
	if p := s.m.Load(); p != nil {
		t, ok := (*p)[ws]
		return t, ok
	}
	return llmrate.Free, false
}

func (s *sync2Map) set(ws string, t llmrate.Tier) {
	next := map[string]llmrate.Tier{}
	if p := s.m.Load(); p != nil {
		for k, v := range *p {
			next[k] = v
		}
	}
	next[ws] = t
	s.m.Store(&next)
}
