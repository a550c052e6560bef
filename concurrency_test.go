package llmrate_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gate is a provider that holds each request until its group is let go:
// entered receives one value per request that reached it.
type gate struct {
	entered chan struct{}
}

type releaseKey struct{}

func newGate() *gate { return &gate{entered: make(chan struct{}, 64)} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.entered <- struct{}{}
	if rel, ok := r.Context().Value(releaseKey{}).(chan struct{}); ok {
		<-rel
	}
	okHandler.ServeHTTP(w, r)
}

// inFlight starts n requests for key (workspace ws, model) that reach g and
// stay there, failing the test if one does not; the returned func lets
// them go and waits for them to end (the test's cleanup calls it too).
func (h *harness) inFlight(g *gate, n int, key, ws, model string) (finish func()) {
	h.t.Helper()
	rel := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	finish = func() {
		once.Do(func() {
			close(rel)
			wg.Wait()
		})
	}
	h.t.Cleanup(finish)
	for i := range n {
		codes := make(chan int, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(""))
			r = r.WithContext(context.WithValue(r.Context(), releaseKey{}, rel))
			r.Header.Set("Authorization", "Bearer "+key)
			r.Header.Set("X-WS", ws)
			if model != "" {
				r.Header.Set("X-Model", model)
			}
			w := httptest.NewRecorder()
			h.h.ServeHTTP(w, r)
			codes <- w.Code
		}()
		select {
		case <-g.entered:
		case code := <-codes:
			h.t.Fatalf("in-flight request %d of %d (key %s) did not reach the provider: %d", i+1, n, key, code)
		}
	}
	return finish
}

// decisions records every DecisionEvent; onDecided, when set, runs on each.
type decisions struct {
	mu        sync.Mutex
	events    []llmrate.DecisionEvent
	onDecided func(llmrate.DecisionEvent)
}

func (d *decisions) Decided(e llmrate.DecisionEvent) {
	d.mu.Lock()
	d.events = append(d.events, e)
	f := d.onDecided
	d.mu.Unlock()
	if f != nil {
		f(e)
	}
}
func (d *decisions) Reconciled(llmrate.ReconcileEvent) {}
func (d *decisions) FailedOpen(llmrate.FailOpenEvent)  {}
func (d *decisions) Evicted()                          {}

func (d *decisions) last() llmrate.DecisionEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.events[len(d.events)-1]
}

// capped returns a tier table whose every tier has the given figures.
func capped(rpm, tpm, concurrent int64) llmrate.TierTable {
	return uniform(llmrate.Limits{RequestsPerMinute: rpm, TokensPerMinute: tpm, ConcurrentRequests: concurrent})
}

func TestBucketNamesIncludeGauges(t *testing.T) {
	t.Parallel()
	for b, want := range map[llmrate.Bucket][3]string{
		llmrate.KeyRequests:         {"key_requests", "key", ""},
		llmrate.WorkspaceTokens:     {"workspace_tokens", "workspace", ""},
		llmrate.KeyConcurrent:       {"key_concurrent", "key", "gauge"},
		llmrate.WorkspaceConcurrent: {"workspace_concurrent", "workspace", "gauge"},
	} {
		assert.Equal(t, want[0], b.String())
		assert.Equal(t, want[1], b.Scope(), "Scope of %v", b)
		assert.Equal(t, want[2] == "gauge", b.Concurrent(), "Concurrent of %v", b)
		assert.False(t, b.Concurrent() && b.Tokens(), "a gauge is not a tokens bucket")
	}
	k := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 2, ConcurrentRequests: 3}
	w := llmrate.Limits{RequestsPerMinute: 4, TokensPerMinute: 5, ConcurrentRequests: 6}
	assert.Equal(t, int64(3), llmrate.KeyConcurrent.Figure(k, w))
	assert.Equal(t, int64(6), llmrate.WorkspaceConcurrent.Figure(k, w))
	assert.Equal(t, int64(5), llmrate.WorkspaceTokens.Figure(k, w))
	assert.Zero(t, llmrate.KeyConcurrent.PerMinute(k, w), "a gauge has no per-minute figure")
}

func TestConcurrencyConfig(t *testing.T) {
	t.Parallel()
	for tier := llmrate.Free; tier <= llmrate.Enterprise; tier++ {
		assert.Zero(t, llmrate.DefaultTiers().For(tier).ConcurrentRequests, "default tiers set no concurrency cap (%v)", tier)
	}
	bad := capped(10, 100, -1)
	for name, opt := range map[string]llmrate.Option{
		"WithTiers":       llmrate.WithTiers(bad),
		"WithKeyTiers":    llmrate.WithKeyTiers(bad),
		"WithModelLimits": llmrate.WithModelLimits(llmrate.ModelLimits{"m": bad}),
	} {
		_, err := llmrate.New(opt, llmrate.WithModel(modelHeaderExtractor))
		var ce *llmrate.ConfigError
		require.ErrorAs(t, err, &ce, name)
		assert.Equal(t, name, ce.Option)
		assert.Contains(t, err.Error(), "ConcurrentRequests -1")
	}
	_, err := llmrate.New(llmrate.WithTiers(capped(10, 100, 0)))
	assert.NoError(t, err, "0 is no cap")
}

// TestConcurrencyKeyGauge: with the default identity (each key its own
// workspace) a key holds at most its figure in flight; the next request is
// refused at once with Retry-After: 1 and a message naming the scope and
// "concurrent requests", takes nothing from the buckets, and a slot frees
// when a response ends.
func TestConcurrencyKeyGauge(t *testing.T) {
	t.Parallel()
	g := newGate()
	obs := &decisions{}
	store := llmrate.NewMemoryStore()
	lim := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000, ConcurrentRequests: 2}
	h := newHarness(t, g, llmrate.WithTiers(uniform(lim)), llmrate.WithObserver(obs), llmrate.WithStore(store))
	finish := h.inFlight(g, 2, "sk-a", "", "")
	before := store.Levels("sk-a", "sk-a", lim, lim, h.clock.Now())
	assert.Equal(t, [4]int64{198, 19_998, 198, 19_998}, before)

	w := h.send("sk-a", 400)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	b := decodeErr(t, w)
	assert.Equal(t, "rate_limit_exceeded", b.Error.Code)
	assert.Contains(t, b.Error.Message, "concurrent requests (key)")
	assert.Contains(t, b.Error.Message, "limit 2 in flight")
	assert.Equal(t, llmrate.KeyConcurrent, obs.last().Refused)
	assert.Equal(t, time.Second, obs.last().RetryAfter)
	assert.Equal(t, before, store.Levels("sk-a", "sk-a", lim, lim, h.clock.Now()), "a gauge's refusal debits no bucket")
	assert.Equal(t, http.StatusOK, h.send("sk-b", 0).Code, "another key has its own gauge")

	finish()
	for i := range 5 {
		assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code, "request %d after the slots were released", i)
	}
}

// TestConcurrencyWorkspaceGauge: the workspace's gauge counts all its
// keys; a key tier caps one key lower; a model entry has gauges of its own.
func TestConcurrencyWorkspaceGauge(t *testing.T) {
	t.Parallel()
	g := newGate()
	obs := &decisions{}
	h := newHarness(t, g, llmrate.WithWorkspace(wsFromHeader), llmrate.WithObserver(obs),
		llmrate.WithTiers(capped(100, 10_000, 3)), llmrate.WithKeyTiers(capped(100, 10_000, 2)),
		llmrate.WithModel(modelHeaderExtractor), llmrate.WithModelLimits(llmrate.ModelLimits{"o3": capped(100, 10_000, 1)}))

	h.inFlight(g, 2, "k1", "acme", "")
	w := h.sendAs("k1", "acme", "", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, llmrate.KeyConcurrent, obs.last().Refused, "the key tier's 2")
	h.inFlight(g, 1, "k2", "acme", "")
	w = h.sendAs("k3", "acme", "", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, llmrate.WorkspaceConcurrent, obs.last().Refused, "three in flight in the workspace")
	assert.Contains(t, decodeErr(t, w).Error.Message, "concurrent requests (workspace)")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	w = h.sendAs("k4", "acme", "o3", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the tier's gauge holds the entry's traffic too")
	assert.Equal(t, llmrate.WorkspaceConcurrent, obs.last().Refused)

	// The entry's own gauges, beside the tier's (which have room here).
	g = newGate()
	h = newHarness(t, g, llmrate.WithWorkspace(wsFromHeader), llmrate.WithObserver(obs),
		llmrate.WithTiers(capped(100, 10_000, 10)), llmrate.WithKeyTiers(capped(100, 10_000, 10)),
		llmrate.WithModel(modelHeaderExtractor), llmrate.WithModelLimits(llmrate.ModelLimits{"o3": capped(100, 10_000, 1)}))
	h.inFlight(g, 1, "k3", "acme", "o3")
	w = h.sendAs("k4", "acme", "o3", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "the model entry's own gauge of 1")
	assert.Contains(t, decodeErr(t, w).Error.Message, "o3 in this workspace on concurrent requests")
	assert.Equal(t, "o3", obs.last().Model)
	w = h.sendAs("k3", "acme", "o3", 0)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, decodeErr(t, w).Error.Message, "o3 for this API key on concurrent requests")
	assert.Equal(t, llmrate.KeyConcurrent, obs.last().Refused)
}

// TestConcurrencyOverrides: an override's figure holds for the workspace and
// its keys; under key tiers the tighter non-zero figure holds; a negative
// figure fails that request open.
func TestConcurrencyOverrides(t *testing.T) {
	t.Parallel()
	g := newGate()
	o := &overrideTable{}
	o.set("one", llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000, ConcurrentRequests: 1})
	o.set("none", llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000})
	o.set("bad", llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000, ConcurrentRequests: -3})
	h := newHarness(t, g, llmrate.WithWorkspace(wsFromHeader), llmrate.WithOverrides(o), llmrate.WithKeyTiers(capped(100, 10_000, 2)))

	h.inFlight(g, 1, "k1", "one", "")
	assert.Equal(t, http.StatusTooManyRequests, h.sendAs("k1", "one", "", 0).Code, "min(2, 1)")
	assert.Equal(t, http.StatusTooManyRequests, h.sendAs("k2", "one", "", 0).Code, "the override's workspace gauge")

	h.inFlight(g, 2, "k1", "none", "")
	assert.Equal(t, http.StatusTooManyRequests, h.sendAs("k1", "none", "", 0).Code, "0 in the override: the key tier's 2 holds")
	h.inFlight(g, 2, "k2", "none", "")
	h.inFlight(g, 2, "k3", "none", "")
	assert.Equal(t, http.StatusTooManyRequests, h.sendAs("k3", "none", "", 0).Code, "6 in flight: the workspace has no cap, each key 2")

	w := h.sendAs("k1", "bad", "", 0)
	assert.Equal(t, http.StatusOK, w.Code, "an invalid override fails open")
	assert.Equal(t, int64(1), h.lim.FailOpens())
}

// brokenWriter fails every write, as a connection the client closed does.
type brokenWriter struct{ h http.Header }

func (b *brokenWriter) Header() http.Header       { return b.h }
func (b *brokenWriter) WriteHeader(int)           {}
func (b *brokenWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// hijackWriter is a ResponseWriter whose connection can be hijacked.
type hijackWriter struct {
	*httptest.ResponseRecorder
	conn net.Conn
}

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// TestConcurrencySlotReleasedHowever: a slot is released when the response
// ends however it ends (a panic, a write error, a hijack, a client gone),
// and exactly once: with a figure of 1, each ending frees exactly the one
// slot its request took.
func TestConcurrencySlotReleasedHowever(t *testing.T) {
	t.Parallel()
	mode := ""
	cancel := context.CancelFunc(func() {})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case "panic":
			panic(http.ErrAbortHandler)
		case "write":
			_, _ = w.Write([]byte(`{"choices":[]}`))
		case "hijack":
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = c.Close()
			}
		case "gone":
			cancel() // the client goes away mid-response
			<-r.Context().Done()
		}
	})
	g := newGate()
	h := newHarness(t, next, llmrate.WithTiers(capped(1000, 100_000, 1)))
	serve := func(w http.ResponseWriter, ctx context.Context) {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("")).WithContext(ctx)
		r.Header.Set("Authorization", "Bearer sk-a")
		func() {
			defer func() { _ = recover() }()
			h.h.ServeHTTP(w, r)
		}()
	}
	for round := range 3 {
		for _, m := range []string{"panic", "write", "hijack", "gone", ""} {
			mode = m
			switch m {
			case "write":
				serve(&brokenWriter{h: http.Header{}}, context.Background())
			case "hijack":
				c1, c2 := net.Pipe()
				serve(&hijackWriter{ResponseRecorder: httptest.NewRecorder(), conn: c1}, context.Background())
				_ = c2.Close()
			case "gone":
				var ctx context.Context
				ctx, cancel = context.WithCancel(context.Background())
				serve(httptest.NewRecorder(), ctx)
				cancel()
			default:
				serve(httptest.NewRecorder(), context.Background())
			}
			mode = ""
			w := h.send("sk-a", 0)
			require.Equal(t, http.StatusOK, w.Code, "round %d: the slot of a %q ending was released", round, m)
		}
	}
	assert.Zero(t, h.lim.FailOpens())

	// Exactly once: a refused request releases nothing, so with one in
	// flight every further request is refused.
	h2 := newHarness(t, g, llmrate.WithTiers(capped(1000, 100_000, 1)))
	finish := h2.inFlight(g, 1, "sk-b", "", "")
	for i := range 3 {
		assert.Equal(t, http.StatusTooManyRequests, h2.send("sk-b", 0).Code, "refusal %d", i)
	}
	finish()
	h2.inFlight(g, 1, "sk-b", "", "")
	assert.Equal(t, http.StatusTooManyRequests, h2.send("sk-b", 0).Code, "one release per admission, not more")
}

// TestConcurrencyShadow: in shadow mode a gauge's would-be refusal passes
// without taking a slot.
func TestConcurrencyShadow(t *testing.T) {
	t.Parallel()
	g := newGate()
	obs := &decisions{}
	h := newHarness(t, g, llmrate.WithTiers(capped(1000, 100_000, 1)), llmrate.WithShadow(), llmrate.WithObserver(obs))
	finish := h.inFlight(g, 2, "sk-a", "", "")
	assert.Equal(t, llmrate.KeyConcurrent, obs.last().Refused)
	assert.False(t, obs.last().Allowed)
	assert.Equal(t, int64(1), h.lim.ShadowRefusals())
	finish()
	h.inFlight(g, 1, "sk-a", "", "")
	assert.True(t, obs.last().Allowed, "the shadow-passed request took no slot, so none leaked")
}

func TestConcurrencyLimitsEndpoint(t *testing.T) {
	t.Parallel()
	tiers := llmrate.DefaultTiers()
	tiers.Developer.ConcurrentRequests = 8
	tiers.Enterprise.ConcurrentRequests = 50
	o3 := uniform(llmrate.Limits{RequestsPerMinute: 5, TokensPerMinute: 9, ConcurrentRequests: 2})
	o3.Free.ConcurrentRequests = 0
	over := llmrate.OverrideResolverFunc(func(_ context.Context, ws string) (llmrate.Limits, bool) {
		if ws == "sk-o" {
			return llmrate.Limits{RequestsPerMinute: 7, TokensPerMinute: 70, ConcurrentRequests: 3}, true
		}
		return llmrate.Limits{}, false
	})
	l, err := llmrate.New(llmrate.WithTiers(tiers), llmrate.WithOverrides(over),
		llmrate.WithTierResolver(llmrate.StaticTiers{"sk-dev": llmrate.Developer, "sk-ent": llmrate.Enterprise}),
		llmrate.WithModel(modelHeaderExtractor), llmrate.WithModelLimits(llmrate.ModelLimits{"o3": o3}))
	require.NoError(t, err)
	docs := "" // no link by default
	assert.Equal(t, jsonMap(t, `{"tier":"developer","requestsPerMin":1000,"tokensPerMin":2000000,"concurrentRequests":8`+docs+`,
		"models":{"o3":{"requestsPerMin":5,"tokensPerMin":9,"concurrentRequests":2}}}`), limitsOf(t, l, "sk-dev"))
	assert.Equal(t, jsonMap(t, `{"tier":"free","requestsPerMin":100,"tokensPerMin":200000`+docs+`,
		"models":{"o3":{"requestsPerMin":5,"tokensPerMin":9}}}`), limitsOf(t, l, "sk-free"), "0: no member")
	assert.Equal(t, jsonMap(t, `{"tier":"enterprise","requestsPerMin":null,"tokensPerMin":null,"note":"`+llmrate.EnterpriseNote+`"`+docs+`,
		"models":{"o3":{"requestsPerMin":null,"tokensPerMin":null}}}`), limitsOf(t, l, "sk-ent"), "never beside null figures")
	assert.Equal(t, jsonMap(t, `{"tier":"free","requestsPerMin":7,"tokensPerMin":70,"concurrentRequests":3`+docs+`,
		"models":{"o3":{"requestsPerMin":5,"tokensPerMin":9}}}`), limitsOf(t, l, "sk-o"))
}

// TestGaugedWithoutIDLeavesNoState: a gauged admission without an ID
// (a caller of the store itself; the limiter always sends one) is an
// ErrNoAdmissionID on every path of the memory store, and it leaves no
// entry behind: one it created could evict a tracked key, uncounted. The
// solo path with windows once made its entry and window set first.
func TestGaugedWithoutIDLeavesNoState(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	gauged := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 6000, ConcurrentRequests: 2}
	daily := gauged
	daily.Windows = []llmrate.Window{{Per: 24 * time.Hour, Requests: 100}}
	for name, r := range map[string]llmrate.AdmitRequest{
		"solo":               {Key: "k", Workspace: "k", KeyLimits: gauged, WorkspaceLimits: gauged, Solo: true},
		"pair":               {Key: "k", Workspace: "ws", KeyLimits: gauged, WorkspaceLimits: gauged},
		"solo, a window":     {Key: "k", Workspace: "k", KeyLimits: daily, WorkspaceLimits: daily, Solo: true},
		"pair, a window":     {Key: "k", Workspace: "ws", KeyLimits: daily, WorkspaceLimits: daily},
		"solo, a day's plan": {Key: "k", Workspace: "k", KeyLimits: gauged, WorkspaceLimits: gauged, Solo: true, KeyPlan: &daily, WorkspacePlan: &daily},
	} {
		t.Run(name, func(t *testing.T) {
			s := llmrate.NewMemoryStore()
			r.Tokens, r.Now = 1, now
			_, err := s.Admit(context.Background(), r)
			require.ErrorIs(t, err, llmrate.ErrNoAdmissionID)
			keys, workspaces := s.Len()
			assert.Zero(t, keys, "no key entry")
			assert.Zero(t, workspaces, "no workspace entry")
		})
	}
}
