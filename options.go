package llmrate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/llmrate/llmrate/usage"
	"go.uber.org/zap"
)

// DefaultStoreTimeout bounds every call to a store other than the built-in
// memory store. Past it the request fails open.
const DefaultStoreTimeout = 50 * time.Millisecond

// Option configures a Limiter. Options only record values; New fills the
// defaults and validates them once.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	key       Extractor
	workspace Extractor
	resolver  TierResolver
	tiers     TierTable
	keyTiers  *TierTable
	clock     func() time.Time
	store     Store
	logger    *zap.Logger
	estimator func(*http.Request) int64
	timeout   time.Duration
	observer  Observer
	headers   HeaderStyle
	streamUse bool
	trailers  bool
	docsURL   string
	// Policies beyond the plan tier (model.go, override.go, shadow.go).
	model       Extractor
	modelLimits ModelLimits
	models      *modelTable
	overrides   OverrideResolver
	shadow      bool
	// Plans (plan.go): the resolver, the plan of a workspace it does not
	// know, and which tier options were set (they exclude WithPlans).
	plans         PlanResolver
	otherwise     Plan
	otherwisePlan *compiledPlan
	plansSet      bool
	tiersSet      bool
	resolverSet   bool
	errs          []error
	nilOptions    int

	// What a request costs (cost.go, calibration.go).
	cost      func(model string, u usage.Usage) int64
	calibrate bool

	// Priority reserves (priority.go): the class extractor and each listed
	// class's reserve in millionths; nil: off.
	class    Extractor
	reserves map[string]int64

	maxWait           time.Duration
	maxInFlight       int
	maxWaiters        int
	maxStoreCalls     int
	reconcileQueue    int
	reconcileQueueSet bool
}

func (c *config) fail(option string, err error) {
	c.errs = append(c.errs, &ConfigError{Option: option, Err: err})
}

var errNil = errors.New("must not be nil")

// WithKey sets the API key extractor. Default: BearerToken(). nil is an
// error.
//
// Without WithWorkspace each key is its own workspace, so a key beginning
// ReservedWorkspacePrefix ("upstream:") is refused 401 invalid_api_key.
func WithKey(e Extractor) Option {
	return optionFunc(func(c *config) {
		if e == nil {
			c.fail("WithKey", errNil)
		}
		c.key = e
	})
}

// WithWorkspace sets the workspace extractor. By default each key is its own
// workspace. nil is an error.
//
// The workspace decides whose allowance a request spends: take it from a
// value your authentication layer set (a context value, a verified header),
// never from a header the client controls, or a client can spend another
// workspace's allowance or escape its own.
//
// A workspace beginning ReservedWorkspacePrefix ("upstream:") is refused
// 401 invalid_api_key: those name package upstream's provider keys.
func WithWorkspace(e Extractor) Option {
	return optionFunc(func(c *config) {
		if e == nil {
			c.fail("WithWorkspace", errNil)
		}
		c.workspace = e
	})
}

// WithTierResolver sets how a workspace's tier is found. Default: every
// workspace is unknown, hence Free. nil is an error.
func WithTierResolver(r TierResolver) Option {
	return optionFunc(func(c *config) {
		if r == nil {
			c.fail("WithTierResolver", errNil)
		}
		c.resolver = r
		c.resolverSet = true
	})
}

// WithTiers sets the figures of every tier. Default: DefaultTiers(). Each
// figure must be in [1, MaxPerMinute].
func WithTiers(t TierTable) Option {
	return optionFunc(func(c *config) { c.tiers, c.tiersSet = t, true })
}

// WithKeyTiers caps each key's own buckets at these figures instead of its
// workspace's (by default one key may use all of its workspace's figure).
func WithKeyTiers(t TierTable) Option {
	return optionFunc(func(c *config) { c.keyTiers = &t })
}

// WithClock sets the clock. Default: time.Now. nil is an error.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now == nil {
			c.fail("WithClock", errNil)
		}
		c.clock = now
	})
}

// WithStore sets where bucket state lives. Default: a new MemoryStore (per
// process). nil is an error.
func WithStore(s Store) Option {
	return optionFunc(func(c *config) {
		if s == nil {
			c.fail("WithStore", errNil)
		}
		c.store = s
	})
}

// WithLogger sets the logger. If nil or unset, nothing is logged. Faults are
// logged at warn, refusals at debug (sampled); a key appears only as a short
// fingerprint.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithEstimator sets the admission token estimate. Default: EstimateTokens
// (Content-Length/4, floor 1). A result below 1 counts as 1. nil is an error.
func WithEstimator(f func(*http.Request) int64) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithEstimator", errNil)
		}
		c.estimator = f
	})
}

// WithTokenCost sets what a response is charged, in tokens, from its
// usage: cost(model, u), where model is the request's model as the WithModel
// extractor reads it ("" without WithModel; the extractor then runs on
// every request, model limits or not) and u the usage the charge is made
// of. The default charge is u.InputTokens + u.OutputTokens.
//
// For a response with final usage, u is that usage, its breakdown fields
// (CachedInputTokens, CacheWriteTokens, ReasoningTokens) included. For
// partial and estimated charges (see ReconcileEvent) u is what the default
// rule adds up: InputTokens the reported input, else the estimate;
// OutputTokens the larger of the reported output and the generated text's
// bytes ÷ 4; the breakdown fields the reported ones when input was
// reported, else 0.
//
// A negative result counts as 0. ReconcileEvent.Actual is the charge
// cost returned (the store still bounds it at twice the bucket's capacity,
// as any charge). A panic in cost is a limiter fault: the admission's
// estimate stands, counted by FailOpens and logged. cost runs on the
// request's goroutine after the handler returns, for every admitted
// request: it must be fast and safe for concurrent use. nil is an error.
func WithTokenCost(cost func(model string, u usage.Usage) int64) Option {
	return optionFunc(func(c *config) {
		if cost == nil {
			c.fail("WithTokenCost", errNil)
		}
		c.cost = cost
	})
}

// WithCalibration scales each admission estimate by what the estimator has
// been getting wrong, per workspace and model: the ratio of the charge
// (ReconcileEvent.Actual) to the raw estimate (the estimator's, at least 1,
// before scaling) over the pair's most recent reconciles with final usage
// (ReconcileUsage; up to 64). Once a pair has 8 of them, admission debits
// ⌈raw × ratio⌉ (at least 1), the ratio being the sum of the charges over
// the sum of the raw estimates, bounded to [0.25, 4]; DecisionEvent.Estimate
// and ReconcileEvent.Estimate are the scaled estimate.
//
// The scaled estimate is for admission only. A response without final
// usage is charged from the raw estimate (the charge rule's input is the
// estimator's, unscaled), so what a response is charged never depends on
// what was learned. Whether a request ever fits is decided on its raw
// estimate: one larger than the request's smallest tokens bucket is
// debited unscaled (and refused as never fitting), and one that fits is
// never scaled past that bucket's capacity.
//
// It learns per Limiter (per process), per workspace and model, so that
// one workspace's traffic never moves another's admission: the request's
// model as the WithModel extractor reads it (the extractor then runs on
// every request, model limits or not); without WithModel every request is
// model "". At most 4,096 pairs are learned at once (the least recently
// used is dropped), and a model name above 256 bytes or a workspace above
// 1,024 bytes is not learned (its estimates are not scaled): names come
// from clients. CalibrationFor reports the ratios a workspace's admissions
// use, Calibration the ratio per model over every workspace. It works with
// any estimator; the reconcile still corrects every charge. Default: off.
func WithCalibration() Option {
	return optionFunc(func(c *config) { c.calibrate = true })
}

// WithStoreTimeout bounds each call to a store other than the built-in
// memory store (which never blocks). Default: DefaultStoreTimeout. Past it
// the request fails open. d must be positive. For a store that honours its
// context (ContextHonouring), the call's deadline is d rounded up by at
// most a millisecond: calls ending in the same millisecond share one
// timer, instead of a timer each (the hot path's cheapest context; a d
// over about 4 s is exact, a timer of its own). That context ends at its
// deadline, or once every call ending in its millisecond has returned and
// a call of the same timeout ending in another millisecond has returned
// after them (it is kept for the next call ending in the same
// millisecond): not when the store's own call returns, so a store must
// not count on that to stop work it started for the call, and should
// cancel what it derives from the context (a context it never cancels,
// or a context.AfterFunc it never stops, lives on with the call's values
// until then: at most d).
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithStoreTimeout", errors.New("must be positive"))
		}
		c.timeout = d
	})
}

// WithObserver receives every decision, reconcile, fail-open and eviction.
// nil (the default) observes nothing.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) { c.observer = o })
}

// WithDocsURL sets the link the 429 message ("See <u>") and the limits
// endpoint ("docs") point the operator's customers to: the operator's own
// page about its plans. Default: DefaultDocsURL, no link at all.
func WithDocsURL(u string) Option {
	return optionFunc(func(c *config) { c.docsURL = u })
}

// DefaultDocsURL is the default link: none. The 429 message then ends
// after its Retry-After sentence and the limits endpoint has no "docs":
// a limiter never sends an operator's customers to this library's pages.
const DefaultDocsURL = ""

// DefaultMaxInjectBody bounds the request body WithStreamUsage reads to
// rewrite: at most this much is held in memory per request being rewritten.
// A larger body (e.g. with inline images) is forwarded untouched, and its
// stream reconciles like any stream without usage.
const DefaultMaxInjectBody = 1 << 20

func newConfig(opts []Option) (*config, error) {
	c := &config{
		key:       BearerToken(),
		resolver:  allFree{},
		tiers:     DefaultTiers(),
		clock:     time.Now,
		estimator: EstimateTokens,
		timeout:   DefaultStoreTimeout,
		docsURL:   DefaultDocsURL,

		maxWaiters: DefaultMaxWaiters,
	}
	for _, o := range opts {
		if o == nil {
			c.nilOptions++
			continue
		}
		o.apply(c)
	}
	if c.nilOptions > 0 {
		c.fail("Option", errors.New("nil option"))
	}
	if err := c.tiers.validate(); err != nil {
		c.fail("WithTiers", err)
	}
	if c.keyTiers != nil {
		if err := c.keyTiers.validate(); err != nil {
			c.fail("WithKeyTiers", err)
		}
	}
	if m, err := compileModels(c.modelLimits); err != nil {
		c.fail("WithModelLimits", err)
	} else {
		c.models = m
	}
	if c.models != nil && c.model == nil {
		c.fail("WithModelLimits", errors.New("needs WithModel: no request would name a model"))
	}
	c.checkPlans()
	if c.headers > HeadersIETF {
		c.fail("WithRateLimitHeaders", errors.New("unknown header style"))
	}
	if c.logger == nil {
		c.logger = zap.NewNop()
	}
	if c.store == nil {
		c.store = NewMemoryStore()
	}
	if !c.reconcileQueueSet {
		c.reconcileQueue = DefaultReconcileQueue
	}
	c.checkQuotaStore()
	if m, ok := c.store.(*MemoryStore); ok && m.Err() != nil {
		c.errs = append(c.errs, m.Err()) // already *ConfigErrors, naming the memory option
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}

// allFree is the default resolver: every workspace is unknown, hence Free.
type allFree struct{}

func (allFree) ResolveTier(context.Context, string) (Tier, bool) { return Free, false }

// checkQuotaStore refuses what only a QuotaStore keeps, on a store that is
// not one: a quota is never silently missing.
func (c *config) checkQuotaStore() {
	if _, ok := c.store.(QuotaStore); ok {
		return
	}
	fail := func(option, what string) {
		c.fail(option, fmt.Errorf("%s needs a store that keeps quotas (llmrate.QuotaStore); %T is not one", what, c.store))
	}
	if c.plansSet {
		fail("WithPlans", "plans")
		return
	}
	tables := []struct {
		name string
		tt   *TierTable
	}{{"WithTiers", &c.tiers}, {"WithKeyTiers", c.keyTiers}}
	for _, t := range tables {
		if t.tt == nil {
			continue
		}
		for tier := Tier(0); tier < tierCount; tier++ {
			l := t.tt.For(tier)
			if l.quotas() {
				fail(t.name, "an Unlimited figure, a calendar or a session window")
				return
			}
			if c.modelLimits != nil && (len(l.Windows) > 0 || l.ConcurrentRequests > 0) {
				fail("WithModelLimits", "model entries under figures with windows or a gauge (an entry adds to them)")
				return
			}
		}
	}
	for name, tt := range c.modelLimits {
		for tier := Tier(0); tier < tierCount; tier++ {
			if tt.For(tier).quotas() {
				fail("WithModelLimits", fmt.Sprintf("model %q: an Unlimited figure, a calendar or a session window", name))
				return
			}
		}
	}
}
