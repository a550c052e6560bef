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
//	    llmrate.window_ms  the refusing bucket's window in whole milliseconds (60000 for the per-minute buckets), on refusals by a bucket only
//	    llmrate.tier     the workspace's tier (Tier.String)
//	    llmrate.model    the ModelLimits entry as configured (e.g. "gpt-4o*"), "" for the default buckets
//	llmrate.wait.duration    histogram, s: the wait of each admission that waits (WithMaxWait)
//	    llmrate.tier, llmrate.model
//	llmrate.fail_opens       counter, {request}: faults that let a request through
//	    llmrate.operation  FailOpenEvent.Op ("admit", "reconcile", "limits", "observer")
//	llmrate.reconciles       counter, {reconcile}: every reconcile
//	    llmrate.reconcile.kind  usage | partial | estimated
//	llmrate.tokens           counter, {token}: the tokens each reconcile charged
//	    gen_ai.token.type  input | output, where the usage splits the charge
//	llmrate.estimate.ratio   histogram, 1: charge ÷ estimate, of each response with final usage
//	llmrate.evictions        counter, {eviction}: buckets the store dropped before they were full
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
// Cardinality is bounded by configuration: no attribute carries an API
// key, a workspace or a model name a client sent (llmrate.model is the
// configured entry a request's model matched).
package otelrate

import (
	"context"
	"errors"
	"sync"

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
	attrTier      = attribute.Key("llmrate.tier")
	attrModel     = attribute.Key("llmrate.model")
	attrOperation = attribute.Key("llmrate.operation")
	attrKind      = attribute.Key("llmrate.reconcile.kind")
	attrTokenType = attribute.Key("gen_ai.token.type")
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
	// by configuration (results, buckets, tiers, configured model
	// entries, operations).
	decisionSets sync.Map              // decisionKey → []metric.AddOption
	waitSets     sync.Map              // waitKey → []metric.RecordOption
	opSets       sync.Map              // string → []metric.AddOption
	kindSets     [3][]metric.AddOption // one option each: passed as is, no slice made per call
	input        []metric.AddOption
	output       []metric.AddOption
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
	for _, k := range []llmrate.ReconcileKind{llmrate.ReconcileUsage, llmrate.ReconcilePartial, llmrate.ReconcileEstimated} {
		o.kindSets[k] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrKind.String(k.String())))}
	}
	o.input = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrTokenType.String("input")))}
	o.output = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrTokenType.String("output")))}
	return o, nil
}

// decisionKey is what a decision's attributes are made of.
type decisionKey struct {
	result string
	bucket string // "" when admitted: no llmrate.bucket
	window int64  // the refusing bucket's window, milliseconds; 0: no llmrate.window_ms
	tier   llmrate.Tier
	model  string
}

// keyOf reads a decision's attributes from its event.
func keyOf(e llmrate.DecisionEvent) decisionKey {
	k := decisionKey{tier: e.Tier, model: e.Model}
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
		k.window = e.Window.Milliseconds()
	}
	return k
}

func (k decisionKey) attributes() attribute.Set {
	kvs := make([]attribute.KeyValue, 0, 5)
	kvs = append(kvs, attrResult.String(k.result), attrTier.String(k.tier.String()), attrModel.String(k.model))
	if k.bucket != "" {
		kvs = append(kvs, attrBucket.String(k.bucket))
	}
	if k.window > 0 {
		kvs = append(kvs, attrWindow.Int64(k.window))
	}
	return attribute.NewSet(kvs...)
}

// waitKey is what a wait's attributes are made of.
type waitKey struct {
	tier  llmrate.Tier
	model string
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
	k := keyOf(e)
	o.decisions.Add(ctx, 1, addOptions(&o.decisionSets, k, k.attributes)...)
	if e.Allowed && e.Wait > 0 {
		wk := waitKey{tier: e.Tier, model: e.Model}
		o.wait.Record(ctx, e.Wait.Seconds(), recordOptions(&o.waitSets, wk, func() attribute.Set {
			return attribute.NewSet(attrTier.String(wk.tier.String()), attrModel.String(wk.model))
		})...)
	}
}

// Reconciled implements llmrate.Observer.
func (o *Observer) Reconciled(e llmrate.ReconcileEvent) {
	ctx := context.Background()
	kind := e.Kind
	if int(kind) >= len(o.kindSets) {
		kind = llmrate.ReconcileEstimated // as ReconcileKind.String names it
	}
	o.reconciles.Add(ctx, 1, o.kindSets[kind]...)
	in, out := e.Reported.InputTokens, e.Reported.OutputTokens
	if kind != llmrate.ReconcileEstimated && in >= 0 && out >= 0 && in+out == e.Actual {
		o.tokens.Add(ctx, in, o.input...)
		o.tokens.Add(ctx, out, o.output...)
	} else if e.Actual > 0 {
		o.tokens.Add(ctx, e.Actual)
	}
	if kind == llmrate.ReconcileUsage && e.Estimate > 0 {
		o.ratio.Record(ctx, float64(e.Actual)/float64(e.Estimate))
	}
}

// FailedOpen implements llmrate.Observer.
func (o *Observer) FailedOpen(e llmrate.FailOpenEvent) {
	o.failOpens.Add(context.Background(), 1, addOptions(&o.opSets, e.Op, func() attribute.Set {
		return attribute.NewSet(attrOperation.String(e.Op))
	})...)
}

// Evicted implements llmrate.Observer.
func (o *Observer) Evicted() { o.evictions.Add(context.Background(), 1) }
