package llmratetest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// factory returns a fresh, empty store that reads time from clock.
type factory = func(t *testing.T, clock func() time.Time) llmrate.Store

// Clock is a settable fake clock, safe for concurrent use. TestStore gives
// each store it makes a fresh Clock's Now; tests of a store's own behaviour
// may use one the same way.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed instant (2026-11-29 12:00:00 UTC).
func NewClock() *Clock { return &Clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

// Now returns the current fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock (backwards for negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// usageHeader tells the provider below what usage to report.
const usageHeader = "X-Test-Usage"

// modelHeader carries the request's model in the model-limits tests.
const modelHeader = "X-Test-Model"

// byHeader is the model extractor of the model-limits tests.
func byHeader(r *http.Request) (string, error) { return r.Header.Get(modelHeader), nil }

var provider = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if u := r.Header.Get(usageHeader); u != "" {
		_, _ = fmt.Fprintf(w, `{"usage":{"prompt_tokens":%s,"completion_tokens":0}}`, u)
		return
	}
	_, _ = io.WriteString(w, `{"choices":[]}`)
})

type env struct {
	t     *testing.T
	clock *Clock
	l     *llmrate.Limiter
	h     http.Handler
}

func newEnv(t *testing.T, f factory, opts ...llmrate.Option) *env {
	t.Helper()
	c := NewClock()
	l, err := llmrate.New(append([]llmrate.Option{
		llmrate.WithStore(f(t, c.Now)), llmrate.WithClock(c.Now),
		llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI), llmrate.WithStoreTimeout(2 * time.Second),
	}, opts...)...)
	if err != nil {
		t.Fatalf("llmrate.New with the store under test: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("Limiter.Close (which closes the store): %v", err)
		}
	})
	return &env{t: t, clock: c, l: l, h: l.Middleware(provider)}
}

type reply struct {
	code           int
	retryAfter     string
	remReq, remTok int64
	hadHeaders     bool
}

// send sends one request and fails the test if the limiter failed open. Call
// it on the test's goroutine only; other goroutines use try.
func (e *env) send(key string, contentLength int64, usage int64) reply {
	return e.sendModel(key, "", contentLength, usage)
}

// sendModel sends a request naming model (none when "") and fails the test
// if the limiter failed open. Call it on the test's goroutine only; other
// goroutines use try.
func (e *env) sendModel(key, model string, contentLength int64, usage int64) reply {
	e.t.Helper()
	rp, err := e.try(key, model, contentLength, usage)
	if err != nil {
		e.t.Fatal(err)
	}
	return rp
}

// try sends one request naming model (none when ""). It never touches the
// test (it may run on any goroutine) and returns an error when the limiter
// failed open.
func (e *env) try(key, model string, contentLength int64, usage int64) (reply, error) {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
	r.ContentLength = contentLength
	r.Header.Set("Authorization", "Bearer "+key)
	if model != "" {
		r.Header.Set(modelHeader, model)
	}
	if usage >= 0 {
		r.Header.Set(usageHeader, strconv.FormatInt(usage, 10))
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	// Reconciles to a non-memory store are applied after the response:
	// wait for them, so that the next request sees this one's charge.
	if err := e.l.Flush(context.Background()); err != nil {
		return reply{}, fmt.Errorf("%s: Limiter.Flush (which flushes the store): %w", key, err)
	}
	rp := reply{code: w.Code, retryAfter: w.Header().Get("Retry-After")}
	rq, okq := w.Header()[llmrate.HeaderRemainingRequests]
	rt, okt := w.Header()[llmrate.HeaderRemainingTokens]
	rp.hadHeaders = okq && okt
	if rp.hadHeaders {
		rp.remReq, _ = strconv.ParseInt(rq[0], 10, 64)
		rp.remTok, _ = strconv.ParseInt(rt[0], 10, 64)
	}
	if !rp.hadHeaders && (w.Code == http.StatusOK || w.Code == http.StatusTooManyRequests) {
		return rp, fmt.Errorf("%s: %d without rate-limit headers: the limiter failed open?", key, w.Code)
	}
	return rp, nil
}

func (e *env) burst(key string, limit int) int {
	return e.burstModel(key, "", limit)
}

func (e *env) burstModel(key, model string, limit int) int {
	e.t.Helper()
	for i := range limit {
		if r := e.sendModel(key, model, 0, -1); r.code != http.StatusOK {
			mustEqual(e.t, http.StatusTooManyRequests, r.code, "%s: status of a request in a burst", key)
			return i
		}
	}
	return limit
}

// TestStore runs the conformance suite against stores made by newStore, each
// as a subtest of t. newStore must return a fresh, empty store that reads
// time only from clock; TestStore closes it (through Limiter.Close) when the
// subtest ends. See the package documentation for what is checked.
//
// TestStore is one long function on purpose: it is the contract's list of
// subtests, each a few lines, read top to bottom like the package doc.
func TestStore(t *testing.T, newStore func(t *testing.T, clock func() time.Time) llmrate.Store) {
	t.Helper()
	f := newStore
	t.Run("WorkedExample", func(t *testing.T) {
		e := newEnv(t, f)
		equal(t, 200, e.burst("sk-w", 1000), "admitted in a burst")
		r := e.send("sk-w", 0, -1)
		equal(t, http.StatusTooManyRequests, r.code, "status")
		equal(t, "1", r.retryAfter, "Retry-After")
		e.clock.Advance(1200 * time.Millisecond)
		equal(t, 2, e.burst("sk-w", 10), "admitted in a burst")
	})
	t.Run("RollbackOnRefusal", func(t *testing.T) {
		e := newEnv(t, f)
		r := e.send("sk-r", 1_200_000, -1) // 300,000 tokens
		mustEqual(t, http.StatusOK, r.code, "status")
		equal(t, int64(199), r.remReq, "remaining requests")
		equal(t, int64(100_000), r.remTok, "remaining tokens")
		r = e.send("sk-r", 600_000, -1) // 150,000 tokens: refused
		mustEqual(t, http.StatusTooManyRequests, r.code, "status")
		equal(t, int64(199), r.remReq, "the refusal's request debit was rolled back")
		equal(t, int64(100_000), r.remTok, "remaining tokens")
		equal(t, "15", r.retryAfter, "50,000 tokens at 200,000/min")
		equal(t, 199, e.burst("sk-r", 1000), "the whole remaining request allowance is there")
	})
	t.Run("SeparateWorkspaceRollback", func(t *testing.T) {
		// Not Solo: the key's and the workspace's buckets are kept apart.
		e := newEnv(t, f, llmrate.WithWorkspace(func(r *http.Request) (string, error) {
			k, err := llmrate.BearerToken()(r)
			return "ws-" + k, err
		}))
		mustEqual(t, http.StatusOK, e.send("sk-s", 1_200_000, 50_000).code)
		r := e.send("sk-s", 1_600_000, -1) // 400,000 tokens: refused
		mustEqual(t, http.StatusTooManyRequests, r.code, "status")
		equal(t, int64(199), r.remReq, "rolled back")
		equal(t, int64(350_000), r.remTok, "reconciled in both scopes")
		equal(t, "15", r.retryAfter, "Retry-After")
		equal(t, 199, e.burst("sk-s", 1000), "admitted in a burst")
	})
	t.Run("ReconcileCreditAndDebit", func(t *testing.T) {
		e := newEnv(t, f)
		mustEqual(t, http.StatusOK, e.send("sk-c", 1_200_000, 50_000).code, "status") // est 300,000, used 50,000
		r := e.send("sk-c", 4, -1)
		equal(t, int64(350_000-1), r.remTok, "250,000 credited back")
		mustEqual(t, http.StatusOK, e.send("sk-c", 4, 500_000).code, "status") // est 1, used 500,000
		r = e.send("sk-c", 4, -1)
		mustEqual(t, http.StatusTooManyRequests, r.code, "the bucket is in debt")
		// level: 349,999 - 1 - 499,999 = -150,001; 1 token needs 150,002 at 200,000/min = 45.0006 s
		equal(t, "46", r.retryAfter, "Retry-After")
		equal(t, int64(0), r.remTok, "remaining never shows negative")
	})
	t.Run("BoundsAndIdleRefill", func(t *testing.T) {
		e := newEnv(t, f)
		mustEqual(t, http.StatusOK, e.send("sk-b", 4, 1_000_000_000_000_000).code, "status") // absurd usage
		r := e.send("sk-b", 4, -1)
		mustEqual(t, http.StatusTooManyRequests, r.code, "status")
		equal(t, "60", r.retryAfter, "bounded debt: 800,000 charged, at most minutes to repay")
		// level: 400,000 - 1 (estimate) - (800,000 - 1) = -400,000. One token
		// needs 400,001 at 200,000/min: 120 s + 300 µs.
		e.clock.Advance(120 * time.Second)
		r = e.send("sk-b", 4, -1)
		equal(t, http.StatusTooManyRequests, r.code, "status")
		equal(t, "1", r.retryAfter, "Retry-After")
		e.clock.Advance(299 * time.Microsecond)
		equal(t, http.StatusTooManyRequests, e.send("sk-b", 4, -1).code, "1 µs early")
		e.clock.Advance(time.Microsecond)
		equal(t, http.StatusOK, e.send("sk-b", 4, -1).code, "exactly on time")
	})
	t.Run("IdleHourExactlyFull", func(t *testing.T) {
		e := newEnv(t, f)
		mustEqual(t, http.StatusOK, e.send("sk-i", 4, 900_000).code)
		e.clock.Advance(time.Hour)
		r := e.send("sk-i", 4, -1)
		equal(t, int64(199), r.remReq, "remaining requests")
		equal(t, int64(400_000-1), r.remTok, "full again, never more")
		equal(t, 199, e.burst("sk-i", 1000), "200 admitted after the hour, not 201")
	})
	t.Run("BackwardsClock", func(t *testing.T) {
		e := newEnv(t, f)
		mustEqual(t, 200, e.burst("sk-bc", 1000), "admitted in a burst")
		e.clock.Advance(-time.Hour)
		equal(t, 0, e.burst("sk-bc", 5), "admitted in a burst")
		e.clock.Advance(time.Hour + 600*time.Millisecond)
		equal(t, 1, e.burst("sk-bc", 5), "admitted in a burst")
	})
	t.Run("TierChangeKeepsLevel", func(t *testing.T) {
		var tier atomic.Int64
		tier.Store(int64(llmrate.Growth))
		res := llmrate.TierResolverFunc(func(_ context.Context, _ string) (llmrate.Tier, bool) { return llmrate.Tier(tier.Load()), true })
		e := newEnv(t, f, llmrate.WithTierResolver(res))
		equal(t, http.StatusOK, e.send("sk-t", 0, -1).code)
		tier.Store(int64(llmrate.Free))
		r := e.send("sk-t", 0, -1)
		equal(t, int64(199), r.remReq, "clamped to Free's capacity, then debited")
		equal(t, 199, e.burst("sk-t", 1000), "admitted in a burst")
		tier.Store(int64(llmrate.Growth))
		equal(t, 0, e.burst("sk-t", 5), "no reset and no free refill on upgrade")
		e.clock.Advance(12 * time.Millisecond) // Growth refills 5,000/min: one per 12 ms
		equal(t, 1, e.burst("sk-t", 5), "admitted in a burst")
	})
	t.Run("TwoKeysOneWorkspace", func(t *testing.T) {
		e := newEnv(t, f, llmrate.WithWorkspace(func(*http.Request) (string, error) { return "team", nil }))
		n := 0
		for i := range 400 {
			if e.send([]string{"k1", "k2"}[i%2], 0, -1).code == http.StatusOK {
				n++
			}
		}
		equal(t, 200, n, "admitted")
	})
	t.Run("NeverFits", func(t *testing.T) {
		e := newEnv(t, f)
		r := e.send("sk-n", 4*400_001, -1)
		equal(t, http.StatusTooManyRequests, r.code, "status")
		equal(t, "60", r.retryAfter, "Retry-After")
		equal(t, int64(200), r.remReq, "remaining requests")
	})
	t.Run("HugeFigures", func(t *testing.T) {
		big := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
		e := newEnv(t, f, llmrate.WithTiers(llmrate.TierTable{Free: big, Developer: big, Team: big, Growth: big, Scale: big, Enterprise: big}))
		mustEqual(t, http.StatusOK, e.send("sk-h", 4*2*llmrate.MaxPerMinute, -1).code)
		e.clock.Advance(37*time.Second + 123456*time.Microsecond)
		r := e.send("sk-h", 4, -1)
		// 1e12/min over 37.123456 s = 618,724,266,666.67 tokens, minus this request's 1
		equal(t, int64(618_724_266_666-1), r.remTok, "remaining tokens")
		e.clock.Advance(500 * 24 * time.Hour)
		r = e.send("sk-h", 4, -1)
		equal(t, int64(2*llmrate.MaxPerMinute-1), r.remTok, "years later: exactly full")
	})
	t.Run("Models", func(t *testing.T) { runModels(t, f) })
	t.Run("OverrideChangeKeepsLevel", func(t *testing.T) {
		var rpm atomic.Int64
		rpm.Store(10)
		over := llmrate.OverrideResolverFunc(func(_ context.Context, ws string) (llmrate.Limits, bool) {
			return llmrate.Limits{RequestsPerMinute: rpm.Load(), TokensPerMinute: 1000}, ws == "sk-o"
		})
		e := newEnv(t, f, llmrate.WithOverrides(over))
		for range 5 {
			mustEqual(t, http.StatusOK, e.send("sk-o", 0, -1).code)
		}
		rpm.Store(3)
		equal(t, 6, e.burst("sk-o", 20), "15 left, clamped to the new capacity of 6")
		rpm.Store(10)
		equal(t, 0, e.burst("sk-o", 5), "no reset and no free refill on raising it")
		e.clock.Advance(6 * time.Second) // 10/min: one per 6 s
		equal(t, 1, e.burst("sk-o", 5), "admitted in a burst")
		equal(t, 200, e.burst("sk-x", 1000), "a workspace without an override keeps its tier")
	})
	t.Run("ShadowMatchesEnforcement", func(t *testing.T) { runShadow(t, f) })
	t.Run("Identity", func(t *testing.T) { runIdentity(t, f) })
	t.Run("Gauges", func(t *testing.T) { runGauges(t, f) })
	t.Run("Reservations", func(t *testing.T) { runReservations(t, f) })
	t.Run("Windows", func(t *testing.T) { runWindows(t, f) })
	t.Run("Reserves", func(t *testing.T) { runReserves(t, f) })
	t.Run("Quotas", func(t *testing.T) { runQuotas(t, f) })
	t.Run("Concurrent250", func(t *testing.T) {
		e := newEnv(t, f)
		var n atomic.Int64
		var mu sync.Mutex
		var errs []error // reported on the test's goroutine, never from the senders
		var wg sync.WaitGroup
		for range 250 {
			wg.Go(func() {
				r, err := e.try("sk-cc", "", 0, -1)
				if err == nil && r.code != http.StatusOK && r.code != http.StatusTooManyRequests {
					err = fmt.Errorf("status %d", r.code)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if r.code == http.StatusOK {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		equal(t, int64(200), n.Load(), "admitted")
	})
}

// runModels: a model entry's buckets are its own, per key and per
// workspace, apart from the default buckets and from every other entry's;
// the models one prefix entry matches share its buckets.
func runModels(t *testing.T, f factory) {
	small := func(rpm, tpm int64) llmrate.TierTable {
		l := llmrate.Limits{RequestsPerMinute: rpm, TokensPerMinute: tpm}
		return llmrate.TierTable{Free: l, Developer: l, Team: l, Growth: l, Scale: l, Enterprise: l}
	}
	models := llmrate.WithModelLimits(llmrate.ModelLimits{
		"gpt-4o":   small(3, 1000),
		"gpt-4o*":  small(5, 1000),
		"claude-*": small(2, 1000),
	})
	withModel := llmrate.WithModel(byHeader)
	t.Run("SeparateBuckets", func(t *testing.T) {
		e := newEnv(t, f, withModel, models)
		equal(t, 6, e.burstModel("sk-m", "gpt-4o", 100), "the exact entry: 2×3")
		equal(t, 10, e.burstModel("sk-m", "gpt-4o-2024-08-06", 100), "the prefix entry's own buckets: 2×5")
		equal(t, 0, e.burstModel("sk-m", "gpt-4o-mini", 100), "one prefix entry, one set of buckets")
		equal(t, 4, e.burstModel("sk-m", "claude-3-5-haiku", 100), "2×2")
		equal(t, 200, e.burstModel("sk-m", "mistral-large", 1000), "no entry: the default buckets, untouched so far")
		equal(t, 0, e.burst("sk-m", 5), "no model: the same default buckets")
		equal(t, 6, e.burstModel("sk-other", "gpt-4o", 100), "another key (its own workspace) has its own")
		e.clock.Advance(20 * time.Second) // 1 request of gpt-4o (3/min), 1 of claude (2/min: 0.67)
		equal(t, 1, e.burstModel("sk-m", "gpt-4o", 100), "admitted in a burst")
		equal(t, 0, e.burstModel("sk-m", "claude-3-opus", 100), "admitted in a burst")
	})
	t.Run("WorkspaceShared", func(t *testing.T) {
		e := newEnv(t, f, withModel, models, llmrate.WithWorkspace(func(*http.Request) (string, error) { return "team", nil }))
		n := 0
		for i := range 20 {
			if e.sendModel([]string{"k1", "k2"}[i%2], "gpt-4o", 0, -1).code == http.StatusOK {
				n++
			}
		}
		equal(t, 6, n, "two keys exhaust the workspace's gpt-4o buckets together")
		equal(t, 200, e.burst("k3", 1000), "the workspace's default buckets are apart")
	})
	t.Run("RollbackAndReconcile", func(t *testing.T) {
		e := newEnv(t, f, withModel, models, llmrate.WithWorkspace(func(r *http.Request) (string, error) {
			k, err := llmrate.BearerToken()(r)
			return "ws-" + k, err
		}))
		r := e.sendModel("sk-r", "gpt-4o", 4*1500, 300) // est 1,500 of 2,000; used 300
		mustEqual(t, http.StatusOK, r.code, "status")
		equal(t, int64(5), r.remReq, "remaining requests")
		equal(t, int64(500), r.remTok, "remaining tokens")
		r = e.sendModel("sk-r", "gpt-4o", 4*1800, -1) // 1,800 > 1,700 left: refused
		mustEqual(t, http.StatusTooManyRequests, r.code, "status")
		equal(t, int64(5), r.remReq, "rolled back")
		equal(t, int64(1700), r.remTok, "reconciled in the model's buckets: 2,000 - 300")
		equal(t, "6", r.retryAfter, "100 tokens at 1,000/min")
		r = e.send("sk-r", 4, -1)
		equal(t, int64(199), r.remReq, "the default buckets were never touched")
		equal(t, int64(400_000-1), r.remTok, "remaining tokens")
	})
}

// decisions records the observer's decisions.
type decisions struct {
	mu sync.Mutex
	ds []llmrate.DecisionEvent
}

func (d *decisions) Decided(e llmrate.DecisionEvent) {
	d.mu.Lock()
	d.ds = append(d.ds, e)
	d.mu.Unlock()
}
func (*decisions) Reconciled(llmrate.ReconcileEvent) {}
func (*decisions) FailedOpen(llmrate.FailOpenEvent)  {}
func (*decisions) Evicted()                          {}

// runShadow replays one random trace (clock moves, requests of three keys
// in two workspaces over models with and without entries, usage reports)
// against an enforcing limiter and a shadow one: the decisions must be the
// same, one by one, because a would-be refusal debits nothing and is not
// reconciled. Enforcement answers 429 exactly where the decision refused;
// shadow mode answers 200 throughout. One piece: the two limiters step
// through the same trace together, and each step's checks need both.
func runShadow(t *testing.T, f factory) {
	tiers := llmrate.TierTable{}
	for _, p := range []*llmrate.Limits{&tiers.Free, &tiers.Developer, &tiers.Team, &tiers.Growth, &tiers.Scale, &tiers.Enterprise} {
		*p = llmrate.Limits{RequestsPerMinute: 4, TokensPerMinute: 600}
	}
	mt := llmrate.TierTable{Free: llmrate.Limits{RequestsPerMinute: 2, TokensPerMinute: 300}}
	mt.Developer, mt.Team, mt.Growth, mt.Scale, mt.Enterprise = mt.Free, mt.Free, mt.Free, mt.Free, mt.Free
	opts := func(o llmrate.Observer) []llmrate.Option {
		return []llmrate.Option{
			llmrate.WithTiers(tiers), llmrate.WithObserver(o), llmrate.WithModel(byHeader),
			llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o*": mt}),
			llmrate.WithWorkspace(func(r *http.Request) (string, error) {
				k, err := llmrate.BearerToken()(r)
				return map[string]string{"k1": "A", "k2": "A", "k3": "B"}[k], err
			}),
		}
	}
	for seed := range uint64(6) {
		var enf, sh decisions
		e := newEnv(t, f, opts(&enf)...)
		s := newEnv(t, f, append(opts(&sh), llmrate.WithShadow())...)
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		refused := 0
		for step := range 80 {
			if r.IntN(6) == 0 {
				d := time.Duration(r.Int64N(int64(20 * time.Second)))
				e.clock.Advance(d)
				s.clock.Advance(d)
				continue
			}
			key := []string{"k1", "k2", "k3"}[r.IntN(3)]
			model := []string{"", "gpt-4o", "gpt-4o-mini", "o3"}[r.IntN(4)]
			cl := r.Int64N(4 * 250)
			usage := int64(-1)
			if r.IntN(2) == 0 {
				usage = r.Int64N(400)
			}
			re, rs := e.sendModel(key, model, cl, usage), s.sendModel(key, model, cl, usage)
			mustEqual(t, http.StatusOK, rs.code, "seed %d step %d: shadow mode refused", seed, step)
			if re.code != http.StatusOK {
				refused++
			}
			enf.mu.Lock()
			n := len(enf.ds)
			want := enf.ds[n-1]
			enf.mu.Unlock()
			sh.mu.Lock()
			got := sh.ds[len(sh.ds)-1]
			sh.mu.Unlock()
			if !got.Shadow {
				t.Fatalf("seed %d step %d: a decision under WithShadow has Shadow false", seed, step)
			}
			got.Shadow = false
			mustEqual(t, want, got, "seed %d step %d: the shadow decision differs from enforcement's", seed, step)
			mustEqual(t, want.Allowed, re.code == http.StatusOK, "seed %d step %d", seed, step)
			mustEqual(t, re.remReq, rs.remReq, "seed %d step %d: headers", seed, step)
			mustEqual(t, re.remTok, rs.remTok, "seed %d step %d: headers", seed, step)
		}
		if refused == 0 {
			t.Fatalf("seed %d: the trace refused nothing, so it proves nothing", seed)
		}
	}
}

// direct is a store under test called directly (not through a limiter),
// with its clock; the store is closed when the test ends, when it can be.
type direct struct {
	t     *testing.T
	s     llmrate.Store
	clock *Clock
}

func newDirect(t *testing.T, f factory) *direct {
	c := NewClock()
	s := f(t, c.Now)
	if cl, ok := s.(interface{ Close(context.Context) error }); ok {
		t.Cleanup(func() {
			if err := cl.Close(context.Background()); err != nil {
				t.Errorf("closing the store: %v", err)
			}
		})
	}
	return &direct{t: t, s: s, clock: c}
}

// Figures of the identity tests: key capacity 20 requests and 2,000
// tokens, workspace 200 and 20,000.
var (
	idKey = llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
	idWs  = llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000}
)

func (d *direct) admit(id string, tokens int64) llmrate.Decision {
	d.t.Helper()
	dec, err := d.s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-id", Workspace: "ws-id", KeyLimits: idKey, WorkspaceLimits: idWs,
		Tokens: tokens, Now: d.clock.Now(), ID: id})
	if err != nil {
		d.t.Fatalf("Admit: %v", err)
	}
	return dec
}

func (d *direct) reconcile(id, receipt string, estimate, actual int64, refund bool) {
	d.t.Helper()
	err := d.s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: "sk-id", Workspace: "ws-id", KeyLimits: idKey, WorkspaceLimits: idWs,
		Estimate: estimate, Actual: actual, Now: d.clock.Now(), ID: id, Receipt: receipt, Refund: refund})
	if err != nil {
		d.t.Fatalf("Reconcile: %v", err)
	}
}

// runIdentity checks the Store contract's identities: an admission sent
// again with its ID is answered with its first decision and debits
// nothing again; a reconcile (or refund) sent again with its ID is applied
// once; a refund gives the admission back in full.
func runIdentity(t *testing.T, f factory) {
	t.Run("AdmissionRepeated", func(t *testing.T) {
		d := newDirect(t, f)
		id := llmrate.NewAdmissionID()
		first := d.admit(id, 300)
		mustEqual(t, true, first.Allowed, "allowed")
		equal(t, [4]int64{19, 1700, 199, 19_700}, first.Remaining, "remaining after 300 tokens")
		again := d.admit(id, 300)
		equal(t, true, again.Allowed, "the repeat's decision")
		equal(t, first.Remaining, again.Remaining, "the repeat is answered with the first decision")
		equal(t, [4]int64{18, 1699, 198, 19_699}, d.admit(llmrate.NewAdmissionID(), 1).Remaining, "debited once, then one more token")
	})
	t.Run("ReconcileRepeated", func(t *testing.T) {
		d := newDirect(t, f)
		id := llmrate.NewAdmissionID()
		dec := d.admit(id, 300)
		mustEqual(t, true, dec.Allowed, "allowed")
		for range 3 {
			d.reconcile(id, dec.Receipt, 300, 800, false) // 500 more tokens
		}
		equal(t, [4]int64{18, 1200 - 1, 198, 19_200 - 1}, d.admit(llmrate.NewAdmissionID(), 1).Remaining, "the 500 debited once")
	})
	t.Run("Refund", func(t *testing.T) {
		d := newDirect(t, f)
		id := llmrate.NewAdmissionID()
		dec := d.admit(id, 300)
		mustEqual(t, true, dec.Allowed, "allowed")
		for range 2 {
			d.reconcile(id, dec.Receipt, 300, 1_000_000, true)
		}
		equal(t, [4]int64{19, 1999, 199, 19_999}, d.admit(llmrate.NewAdmissionID(), 1).Remaining, "refunded in full, once; Actual ignored")
	})
}

// equal reports a failure unless got is want; msg (a format and its
// arguments) says what was compared.
func equal[T comparable](t *testing.T, want, got T, msg ...any) bool {
	t.Helper()
	if got == want {
		return true
	}
	t.Errorf("%sgot %v, want %v", describe(msg), got, want)
	return false
}

// mustEqual is equal, ending the test on a failure.
func mustEqual[T comparable](t *testing.T, want, got T, msg ...any) {
	t.Helper()
	if got != want {
		t.Fatalf("%sgot %v, want %v", describe(msg), got, want)
	}
}

// describe formats msg (a format and its arguments) as a prefix.
func describe(msg []any) string {
	if len(msg) == 0 {
		return ""
	}
	format, ok := msg[0].(string)
	if !ok {
		return fmt.Sprint(msg...) + ": "
	}
	return fmt.Sprintf(format, msg[1:]...) + ": "
}
