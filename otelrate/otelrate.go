// Package otelrate records llmrate's events as OpenTelemetry metrics: an
// llmrate.Observer over the OpenTelemetry metric API, to export through
// whatever SDK and exporter the program configures (Prometheus, OTLP, …).
//
//	obs, err := otelrate.New() // the global MeterProvider
//	if err != nil { … }
//	lim, err := llmrate.New(llmrate.WithObserver(obs))
//
// It is a module of its own, so that llmrate's go.mod never carries
// OpenTelemetry. The instruments, in the meter named by this package's
// import path:
//
//	llmrate.decisions        counter, {decision}: every admission decision
//	    llmrate.result   allowed | waited | refused | shadow_refused
//	    llmrate.bucket   the refusing bucket or gauge (Bucket.String), on refusals only
//	    llmrate.window_ms  the refusing bucket's window in whole milliseconds (60000 for the per-minute buckets), on refusals by a rolling window or a session; the first 256 distinct lengths only (a refusal by any other goes without)
//	    llmrate.calendar   day | week | month, on refusals by a calendar window (its zone is not recorded: bounded attributes)
//	    llmrate.session    true, on refusals by a session window
//	    llmrate.tier     the workspace's tier (Tier.String); not under WithPlans
//	    llmrate.plan     the request's plan (DecisionEvent.Plan: the tier's name until WithPlans)
//	    llmrate.model    the ModelLimits entry as configured (e.g. "gpt-4o*"), "" for the default buckets
//	llmrate.wait.duration    histogram, s: the wait of each admission that waits (WithMaxWait)
//	    llmrate.tier, llmrate.plan, llmrate.model
//	llmrate.fail_opens       counter, {request}: faults that let a request through
//	    llmrate.operation  FailOpenEvent.Op ("admit", "reconcile", "limits", "observer")
//	    llmrate.plan       FailOpenEvent.Plan ("" when the plan was not known or invalid)
//	llmrate.reconciles       counter, {reconcile}: every reconcile
//	    llmrate.reconcile.kind  usage | partial | estimated
//	    llmrate.plan            ReconcileEvent.Plan
//	llmrate.tokens           counter, {token}: the tokens each reconcile charged
//	    gen_ai.token.type  input | output, where the usage splits the charge
//	    llmrate.plan       ReconcileEvent.Plan
//	llmrate.estimate.ratio   histogram, 1: charge ÷ estimate, of each response with final usage
//	llmrate.evictions        counter, {eviction}: buckets the store dropped before they were full
//
// A store that counts its faults (llmrate.StoreStats: redisstore's) adds
// observable instruments, read at each collection, summed over the
// distinct stores of the limiters this Observer is given to (New hands it
// each limiter's store, Close takes it back; see ObserveStore); none has
// an attribute but llmrate.charge.result:
//
//	llmrate.store.errors          counter, {call}: calls to the shared store that failed
//	llmrate.store.breaker.open    gauge, {store}: stores whose breaker is open now (1 for one store: Redis is down)
//	llmrate.store.breaker.opens   counter, {open}: times a breaker opened
//	llmrate.store.fallbacks       counter, {decision}: admissions a local fallback decided because the shared store did not answer
//	llmrate.store.hedges          counter, {call}: calls sent again on another connection, no answer having come in time
//	llmrate.store.resends         counter, {call}: calls sent again, their reply lost
//	llmrate.store.charges.pending updown counter, {admission}: fallback admissions waiting to be charged to the shared store
//	llmrate.store.charges         counter, {admission}: fallback admissions charged to the shared store
//	    llmrate.charge.result  sent | lost (never to be charged)
//
// Result "waited" is an admission with a reservation's wait (in shadow
// mode: one that would wait); "shadow_refused" a refusal shadow mode let
// through. The charge of a reconcile is split by gen_ai.token.type only
// when it is exactly the usage's input plus its output tokens (final or
// partial usage, with the default cost); any other charge (an estimate,
// generated text counted, a WithTokenCost of its own) is added without
// that attribute. The estimate ratio counts only responses with final
// usage (ReconcileUsage), whose charge is the provider's own count: how
// far admission was from the truth.
//
// Cardinality is bounded: no attribute carries an API key, a workspace
// or a model name a client sent (llmrate.model is the configured entry a
// request's model matched). Plan names and model entry names come from
// configuration, but a plan resolver may answer per workspace, each
// answer with names of its own: an Observer records at most 256 distinct
// plan names and 256 distinct model entry names ("" counted among them),
// the first it sees, and records any other as "_other".
package otelrate

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/llmrate/llmrate"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// scopeName is the instrumentation scope of the meter: this package's
// import path.
const scopeName = "github.com/llmrate/llmrate/otelrate"

// Attribute keys.
const (
	attrResult    = attribute.Key("llmrate.result")
	attrBucket    = attribute.Key("llmrate.bucket")
	attrWindow    = attribute.Key("llmrate.window_ms")
	attrCalendar  = attribute.Key("llmrate.calendar")
	attrSession   = attribute.Key("llmrate.session")
	attrTier      = attribute.Key("llmrate.tier")
	attrPlan      = attribute.Key("llmrate.plan")
	attrModel     = attribute.Key("llmrate.model")
	attrOperation = attribute.Key("llmrate.operation")
	attrKind      = attribute.Key("llmrate.reconcile.kind")
	attrTokenType = attribute.Key("gen_ai.token.type")
	attrCharge    = attribute.Key("llmrate.charge.result")
)

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	provider metric.MeterProvider
	errs     []error
}

// WithMeterProvider sets the MeterProvider the instruments are created
// from. Default: the global one (otel.GetMeterProvider). nil is an error.
func WithMeterProvider(p metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if p == nil {
			c.errs = append(c.errs, errors.New("otelrate: WithMeterProvider: must not be nil"))
		}
		c.provider = p
	})
}

// Observer is an llmrate.Observer recording OpenTelemetry metrics. It is
// safe for concurrent use; give one to every Limiter whose events it
// should count.
type Observer struct {
	decisions  metric.Int64Counter
	wait       metric.Float64Histogram
	failOpens  metric.Int64Counter
	reconciles metric.Int64Counter
	tokens     metric.Int64Counter
	ratio      metric.Float64Histogram
	evictions  metric.Int64Counter

	// Attribute sets, made once per distinct value: every one is bounded
	// by configuration (results, buckets, tiers, operations) or by plans
	// and models (at most maxNames names each).
	decisionSets sync.Map // decisionKey → []metric.AddOption
	waitSets     sync.Map // waitKey → []metric.RecordOption
	opSets       sync.Map // opKey → []metric.AddOption
	kindSets     sync.Map // kindKey → []metric.AddOption
	tokenSets    sync.Map // tokenKey → []metric.AddOption
	plans        names
	models       names
	windows      windowSet

	stores storeSet // the stores whose counters the observable instruments read
}

var _ llmrate.StoreStatsObserver = (*Observer)(nil)

// storeSet is the stores handed to ObserveStore, each subscription by an
// identity of its own (a store handed over by several limiters is there
// several times: read once).
type storeSet struct {
	mu   sync.Mutex
	next uint64
	subs map[uint64]llmrate.StoreStats
}

// maxNames is how many distinct plan names, and how many distinct model
// entry names, an Observer records; past it, a new name is recorded as
// otherName.
const maxNames = 256

// otherName stands for the names past maxNames.
const otherName = "_other"

// names bounds the distinct values of an attribute: the first maxNames
// seen are kept, any other is otherName. A name seen before costs one
// lookup and no lock.
type names struct {
	seen sync.Map // string → struct{}
	full atomic.Bool
	mu   sync.Mutex
	n    int // under mu
}

// bound returns s if it is one of the names kept (kept now, when there is
// room), else otherName.
func (c *names) bound(s string) string {
	if _, ok := c.seen.Load(s); ok {
		return s
	}
	if c.full.Load() {
		return otherName
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen.Load(s); ok {
		return s
	}
	if c.n >= maxNames {
		c.full.Store(true)
		return otherName
	}
	c.n++
	s = strings.Clone(s) // kept: not a piece of a caller's larger string
	c.seen.Store(s, struct{}{})
	return s
}

// windowSet keeps the distinct window lengths recorded as llmrate.window_ms,
// at most maxNames of them: a resolver may answer figures per workspace.
type windowSet struct {
	mu   sync.RWMutex
	seen map[int64]struct{}
}

// bound returns ms if it is one of the lengths kept (kept now, when there
// is room), else 0: the refusal is recorded without llmrate.window_ms.
func (c *windowSet) bound(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	c.mu.RLock()
	_, ok := c.seen[ms]
	c.mu.RUnlock()
	if ok {
		return ms
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[ms]; ok {
		return ms
	}
	if len(c.seen) >= maxNames {
		return 0
	}
	if c.seen == nil {
		c.seen = make(map[int64]struct{})
	}
	c.seen[ms] = struct{}{}
	return ms
}

var _ llmrate.Observer = (*Observer)(nil)

// Histogram boundaries: a wait is at most llmrate.MaxMaxWait (60 s); a
// ratio is near 1 when the estimate is good.
var (
	waitBounds  = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}
	ratioBounds = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 4, 10}
)

// New returns an Observer whose instruments come from the configured
// MeterProvider's meter named by this package's import path.
func New(opts ...Option) (*Observer, error) {
	c := &config{}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("otelrate: nil option"))
			continue
		}
		o.apply(c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	m := c.provider.Meter(scopeName)
	o := &Observer{}
	var errs [7]error
	o.decisions, errs[0] = m.Int64Counter("llmrate.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Admission decisions, by result, refusing bucket, tier and model entry."))
	o.wait, errs[1] = m.Float64Histogram("llmrate.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long an admission with a reservation waited before the next handler saw it."),
		metric.WithExplicitBucketBoundaries(waitBounds...))
	o.failOpens, errs[2] = m.Int64Counter("llmrate.fail_opens", metric.WithUnit("{request}"),
		metric.WithDescription("Requests let through unchecked, or not reconciled, because the limiter's own state faulted."))
	o.reconciles, errs[3] = m.Int64Counter("llmrate.reconciles", metric.WithUnit("{reconcile}"),
		metric.WithDescription("Reconciles of admitted responses, by what the charge was based on."))
	o.tokens, errs[4] = m.Int64Counter("llmrate.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens charged by reconciles, input and output where the usage splits them."))
	o.ratio, errs[5] = m.Float64Histogram("llmrate.estimate.ratio", metric.WithUnit("1"),
		metric.WithDescription("The charge divided by the admission estimate, for responses with final usage."),
		metric.WithExplicitBucketBoundaries(ratioBounds...))
	o.evictions, errs[6] = m.Int64Counter("llmrate.evictions", metric.WithUnit("{eviction}"),
		metric.WithDescription("Buckets the store dropped before they were full."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	if err := o.storeInstruments(m); err != nil {
		return nil, err
	}
	return o, nil
}

// decisionKey is what a decision's attributes are made of.
type decisionKey struct {
	result string
	bucket string // "" when admitted: no llmrate.bucket
	window int64  // the refusing bucket's window, milliseconds; 0: no llmrate.window_ms
	cal    llmrate.Calendar
	sess   bool
	tier   llmrate.Tier
	tiered bool   // the plan is a tier: llmrate.tier is recorded
	plan   string // bounded (names)
	model  string // bounded (names)
}

// keyOf reads a decision's attributes from its event.
func (o *Observer) keyOf(e llmrate.DecisionEvent) decisionKey {
	k := decisionKey{tier: e.Tier, tiered: !e.Named, plan: o.plans.bound(e.Plan), model: o.models.bound(e.Model)}
	switch {
	case e.Allowed && e.Wait > 0:
		k.result = "waited"
	case e.Allowed:
		k.result = "allowed"
	case e.Shadow:
		k.result = "shadow_refused"
	default:
		k.result = "refused"
	}
	if !e.Allowed {
		k.bucket = e.Refused.String()
		// llmrate.window_ms: the refusing bucket's window in milliseconds
		// (0 for a gauge: no attribute). A window is whole milliseconds,
		// so this is exact: a 1 s and a 1.5 s window are told apart.
		k.window = o.windows.bound(e.Window.Milliseconds())
		k.cal, k.sess = e.Calendar, e.Session
	}
	return k
}

func (k decisionKey) attributes() attribute.Set {
	kvs := make([]attribute.KeyValue, 0, 6)
	kvs = append(kvs, attrResult.String(k.result), attrPlan.String(k.plan), attrModel.String(k.model))
	if k.tiered {
		kvs = append(kvs, attrTier.String(k.tier.String()))
	}
	if k.bucket != "" {
		kvs = append(kvs, attrBucket.String(k.bucket))
	}
	if k.window > 0 {
		kvs = append(kvs, attrWindow.Int64(k.window))
	}
	if k.cal != llmrate.NoCalendar {
		kvs = append(kvs, attrCalendar.String(k.cal.String()))
	}
	if k.sess {
		kvs = append(kvs, attrSession.Bool(true))
	}
	return attribute.NewSet(kvs...)
}

// waitKey is what a wait's attributes are made of.
type waitKey struct {
	tier   llmrate.Tier
	tiered bool
	plan   string
	model  string
}

// opKey is what a fail-open's attributes are made of.
type opKey struct{ op, plan string }

// kindKey is what a reconcile's attributes are made of.
type kindKey struct {
	kind llmrate.ReconcileKind
	plan string
}

// tokenKey is what a charge's attributes are made of.
type tokenKey struct {
	typ  string // "input", "output"; "": no gen_ai.token.type
	plan string
}

// addOptions returns the options m holds for k, made from mk's set the
// first time: a slice made once, passed as is (a slice made per call would
// be one allocation per measurement).
func addOptions[K comparable](m *sync.Map, k K, mk func() attribute.Set) []metric.AddOption {
	if v, ok := m.Load(k); ok {
		return v.([]metric.AddOption)
	}
	v, _ := m.LoadOrStore(k, []metric.AddOption{metric.WithAttributeSet(mk())})
	return v.([]metric.AddOption)
}

// recordOptions is addOptions for a histogram.
func recordOptions[K comparable](m *sync.Map, k K, mk func() attribute.Set) []metric.RecordOption {
	if v, ok := m.Load(k); ok {
		return v.([]metric.RecordOption)
	}
	v, _ := m.LoadOrStore(k, []metric.RecordOption{metric.WithAttributeSet(mk())})
	return v.([]metric.RecordOption)
}

// Decided implements llmrate.Observer.
func (o *Observer) Decided(e llmrate.DecisionEvent) {
	ctx := context.Background()
	k := o.keyOf(e)
	o.decisions.Add(ctx, 1, addOptions(&o.decisionSets, k, k.attributes)...)
	if e.Allowed && e.Wait > 0 {
		wk := waitKey{tier: e.Tier, tiered: k.tiered, plan: k.plan, model: k.model}
		o.wait.Record(ctx, e.Wait.Seconds(), recordOptions(&o.waitSets, wk, func() attribute.Set {
			if !wk.tiered {
				return attribute.NewSet(attrPlan.String(wk.plan), attrModel.String(wk.model))
			}
			return attribute.NewSet(attrTier.String(wk.tier.String()), attrPlan.String(wk.plan), attrModel.String(wk.model))
		})...)
	}
}

// Reconciled implements llmrate.Observer.
func (o *Observer) Reconciled(e llmrate.ReconcileEvent) {
	ctx := context.Background()
	kind := e.Kind
	if kind != llmrate.ReconcileUsage && kind != llmrate.ReconcilePartial {
		kind = llmrate.ReconcileEstimated // as ReconcileKind.String names it
	}
	plan := o.plans.bound(e.Plan)
	kk := kindKey{kind: kind, plan: plan}
	o.reconciles.Add(ctx, 1, addOptions(&o.kindSets, kk, func() attribute.Set {
		return attribute.NewSet(attrKind.String(kk.kind.String()), attrPlan.String(kk.plan))
	})...)
	in, out := e.Reported.InputTokens, e.Reported.OutputTokens
	if kind != llmrate.ReconcileEstimated && in >= 0 && out >= 0 && in+out == e.Actual {
		o.tokens.Add(ctx, in, o.tokenOptions(tokenKey{typ: "input", plan: plan})...)
		o.tokens.Add(ctx, out, o.tokenOptions(tokenKey{typ: "output", plan: plan})...)
	} else if e.Actual > 0 {
		o.tokens.Add(ctx, e.Actual, o.tokenOptions(tokenKey{plan: plan})...)
	}
	if kind == llmrate.ReconcileUsage && e.Estimate > 0 {
		o.ratio.Record(ctx, float64(e.Actual)/float64(e.Estimate))
	}
}

// tokenOptions returns the options of a charge's attributes.
func (o *Observer) tokenOptions(k tokenKey) []metric.AddOption {
	return addOptions(&o.tokenSets, k, func() attribute.Set {
		if k.typ == "" {
			return attribute.NewSet(attrPlan.String(k.plan))
		}
		return attribute.NewSet(attrTokenType.String(k.typ), attrPlan.String(k.plan))
	})
}

// FailedOpen implements llmrate.Observer.
func (o *Observer) FailedOpen(e llmrate.FailOpenEvent) {
	k := opKey{op: e.Op, plan: o.plans.bound(e.Plan)}
	o.failOpens.Add(context.Background(), 1, addOptions(&o.opSets, k, func() attribute.Set {
		return attribute.NewSet(attrOperation.String(k.op), attrPlan.String(k.plan))
	})...)
}

// Evicted implements llmrate.Observer.
func (o *Observer) Evicted() { o.evictions.Add(context.Background(), 1) }

// storeInstruments makes the observable instruments of the stores'
// counters, read by one callback.
func (o *Observer) storeInstruments(m metric.Meter) error {
	var (
		errs                                                    [8]error
		storeErrors, opens, fallbacks, hedges, resends, charges metric.Int64ObservableCounter
		open                                                    metric.Int64ObservableGauge
		pending                                                 metric.Int64ObservableUpDownCounter
	)
	storeErrors, errs[0] = m.Int64ObservableCounter("llmrate.store.errors", metric.WithUnit("{call}"),
		metric.WithDescription("Calls to the shared store that failed (a deadline passing included)."))
	open, errs[1] = m.Int64ObservableGauge("llmrate.store.breaker.open", metric.WithUnit("{store}"),
		metric.WithDescription("Stores whose breaker is open now: the shared store is not called, admissions go to the fallback or fail open."))
	opens, errs[2] = m.Int64ObservableCounter("llmrate.store.breaker.opens", metric.WithUnit("{open}"),
		metric.WithDescription("Times a store's breaker opened."))
	fallbacks, errs[3] = m.Int64ObservableCounter("llmrate.store.fallbacks", metric.WithUnit("{decision}"),
		metric.WithDescription("Admissions a local fallback decided because the shared store did not answer."))
	hedges, errs[4] = m.Int64ObservableCounter("llmrate.store.hedges", metric.WithUnit("{call}"),
		metric.WithDescription("Calls sent again on another connection because no answer came in time."))
	resends, errs[5] = m.Int64ObservableCounter("llmrate.store.resends", metric.WithUnit("{call}"),
		metric.WithDescription("Calls sent again because their reply was lost."))
	pending, errs[6] = m.Int64ObservableUpDownCounter("llmrate.store.charges.pending", metric.WithUnit("{admission}"),
		metric.WithDescription("Fallback admissions waiting to be charged to the shared store."))
	charges, errs[7] = m.Int64ObservableCounter("llmrate.store.charges", metric.WithUnit("{admission}"),
		metric.WithDescription("Fallback admissions charged to the shared store (sent), or never to be (lost)."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	sent := metric.WithAttributeSet(attribute.NewSet(attrCharge.String("sent")))
	lost := metric.WithAttributeSet(attribute.NewSet(attrCharge.String("lost")))
	_, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		c, n := o.stores.sum()
		if n == 0 {
			return nil // no store counts: no series
		}
		ob.ObserveInt64(storeErrors, c.Errors)
		ob.ObserveInt64(open, c.open)
		ob.ObserveInt64(opens, c.BreakerOpens)
		ob.ObserveInt64(fallbacks, c.Fallbacks)
		ob.ObserveInt64(hedges, c.Hedges)
		ob.ObserveInt64(resends, c.Resends)
		ob.ObserveInt64(pending, c.ChargesPending)
		ob.ObserveInt64(charges, c.ChargesSent, sent)
		ob.ObserveInt64(charges, c.ChargesLost, lost)
		return nil
	}, storeErrors, open, opens, fallbacks, hedges, resends, pending, charges)
	return err
}

// ObserveStore implements llmrate.StoreStatsObserver: s's counters are
// added to the store instruments until stop is called (stop is
// idempotent). llmrate.New calls it with the limiter's store, and the
// limiter's Close calls stop; a store handed over by several limiters is
// counted once, when its value is comparable (a pointer, as redisstore's
// is). Call it directly for a store no limiter of this Observer uses.
func (o *Observer) ObserveStore(s llmrate.StoreStats) (stop func()) {
	if s == nil {
		return func() {}
	}
	set := &o.stores
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.subs == nil {
		set.subs = make(map[uint64]llmrate.StoreStats)
	}
	set.next++
	id := set.next
	set.subs[id] = s
	var once sync.Once
	return func() {
		once.Do(func() {
			set.mu.Lock()
			defer set.mu.Unlock()
			delete(set.subs, id)
		})
	}
}

// storeSum is the counters of the stores observed, added up.
type storeSum struct {
	llmrate.StoreCounters
	open int64 // stores whose breaker is open
}

// sum adds up the counters of the distinct stores in the set, and returns
// how many there are.
func (set *storeSet) sum() (storeSum, int) {
	set.mu.Lock()
	stores := make([]llmrate.StoreStats, 0, len(set.subs))
	seen := make(map[llmrate.StoreStats]bool, len(set.subs))
	for _, s := range set.subs {
		if reflect.ValueOf(s).Comparable() {
			if seen[s] {
				continue
			}
			seen[s] = true
		}
		stores = append(stores, s)
	}
	set.mu.Unlock()
	var t storeSum
	for _, s := range stores { // read outside the lock: a store's method is its own
		c := s.StoreStats()
		t.Errors += c.Errors
		if c.BreakerOpen {
			t.open++
		}
		t.BreakerOpens += c.BreakerOpens
		t.Fallbacks += c.Fallbacks
		t.Hedges += c.Hedges
		t.Resends += c.Resends
		t.ChargesPending += c.ChargesPending
		t.ChargesSent += c.ChargesSent
		t.ChargesLost += c.ChargesLost
	}
	return t, len(stores)
}
