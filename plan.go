package llmrate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Plan is what a workspace gets under WithPlans: the operator's own plan,
// under its own name.
type Plan struct {
	// Name is the operator's name for the plan ("pro"), shown in 429
	// messages ("on the pro plan"), the limits endpoint ("plan"),
	// DecisionEvent.Plan and otelrate's llmrate.plan: 1 to 64 bytes of
	// a-z, A-Z, 0-9, '.', '_' and '-'.
	Name string
	// Limits are the workspace's figures, and each key's unless Keys is
	// set.
	Limits Limits
	// Keys, when set, holds each key to its own figures (its buckets,
	// windows and gauge) instead of Limits, as WithKeyTiers does under
	// tiers. Its per-minute figures hold the default buckets' traffic only
	// (a model entry's replace them); a per-key cap across every model is
	// a Keys window {Per: time.Minute}.
	Keys *Limits
	// Models maps a model name, or a prefix ending in "*", to that model's
	// figures, as WithModelLimits' entries (it needs WithModel). A request
	// on an entry spends the entry's per-minute buckets instead of the
	// plan's, and is held to the plan's windows and gauges as well as the
	// entry's own: a plan's quota and concurrency cap hold its traffic on
	// every model.
	Models map[string]Limits
}

// PlanResolver maps a workspace to its plan. ok=false means the workspace
// is unknown: it gets WithPlans' otherwise. ResolvePlan is called on every
// request and must be fast and safe for concurrent use (e.g. read an
// atomically swapped snapshot); the Plan it returns must not be changed
// afterwards.
type PlanResolver interface {
	ResolvePlan(ctx context.Context, workspace string) (Plan, bool)
}

// PlanResolverFunc adapts a function to PlanResolver.
type PlanResolverFunc func(ctx context.Context, workspace string) (Plan, bool)

// ResolvePlan calls f.
func (f PlanResolverFunc) ResolvePlan(ctx context.Context, workspace string) (Plan, bool) {
	return f(ctx, workspace)
}

// WithPlans sets how a workspace's plan is found: r answers per workspace,
// and a workspace r does not know gets otherwise. It is the one way to say
// what a workspace gets: WithTiers, WithTierResolver, WithKeyTiers,
// WithModelLimits and WithOverrides beside it are a *ConfigError (the
// resolver answers per workspace, so it is its own override). An invalid
// otherwise is a *ConfigError; an invalid plan r resolves, or a panic in
// r, fails that request open (counted in FailOpens, logged, reported to
// the observer's FailedOpen with Plan ""): otherwise is not applied
// instead. The store must be a QuotaStore (the memory store and the Redis
// store are). Without WithPlans, the tiers are the plans: a tier's name is
// its plan's name.
func WithPlans(r PlanResolver, otherwise Plan) Option {
	return optionFunc(func(c *config) {
		if r == nil {
			c.fail("WithPlans", errNil)
		}
		c.plans = r
		c.otherwise = otherwise
		c.plansSet = true
	})
}

// MaxPlanName is the longest Plan.Name, in bytes.
const MaxPlanName = 64

// compiledPlan is a validated plan, ready for admission.
type compiledPlan struct {
	src    Plan
	name   string
	ws     Limits
	keys   Limits // ws when the plan has no Keys
	split  bool   // Keys set: each key's figures are its own
	models *modelTable
}

// compilePlan validates p (hasModel: WithModel is set) and compiles it.
func compilePlan(p Plan, hasModel bool) (*compiledPlan, error) {
	if err := validPlanName(p.Name); err != nil {
		return nil, err
	}
	cp := &compiledPlan{src: p, name: p.Name, ws: p.Limits, keys: p.Limits}
	if err := p.Limits.validate(); err != nil {
		return nil, fmt.Errorf("plan %s: %w", p.Name, err)
	}
	if p.Keys != nil {
		if err := p.Keys.validate(); err != nil {
			return nil, fmt.Errorf("plan %s: Keys: %w", p.Name, err)
		}
		cp.keys, cp.split = *p.Keys, true
	}
	if len(p.Models) > 0 {
		if !hasModel {
			return nil, fmt.Errorf("plan %s: Models needs WithModel: no request would name a model", p.Name)
		}
		m := make(ModelLimits, len(p.Models))
		for name, lim := range p.Models {
			m[name] = TierTable{Free: lim, Developer: lim, Team: lim, Growth: lim, Scale: lim, Enterprise: lim}
		}
		t, err := compileModels(m)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", p.Name, err)
		}
		cp.models = t
	}
	return cp, nil
}

// validPlanName checks a plan's name byte by byte: it goes into messages
// and metric attributes.
func validPlanName(n string) error {
	if n == "" {
		return errors.New("plan without a Name")
	}
	if len(n) > MaxPlanName {
		return fmt.Errorf("plan name of %d bytes: at most %d", len(n), MaxPlanName)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("plan name %q: byte %d is not one of a-z A-Z 0-9 . _ -", n, i)
		}
	}
	return nil
}

// equalPlan reports whether a and b are the same plan, figures and all.
func equalPlan(a, b Plan) bool {
	if a.Name != b.Name || !a.Limits.Equal(b.Limits) || (a.Keys == nil) != (b.Keys == nil) || len(a.Models) != len(b.Models) {
		return false
	}
	if a.Keys != nil && !a.Keys.Equal(*b.Keys) {
		return false
	}
	for k, v := range a.Models {
		w, ok := b.Models[k]
		if !ok || !v.Equal(w) {
			return false
		}
	}
	return true
}

// maxCachedPlans bounds the compiled plans kept by name: a resolver may
// answer a plan per workspace; past the bound a plan is compiled per
// request.
const maxCachedPlans = 1024

// planCache keeps compiled plans by name, each checked against the plan
// resolved (a plan of that name may change).
type planCache struct {
	mu    sync.RWMutex
	plans map[string]*compiledPlan
}

func (pc *planCache) compile(p Plan, hasModel bool) (*compiledPlan, error) {
	pc.mu.RLock()
	cp := pc.plans[p.Name]
	pc.mu.RUnlock()
	if cp != nil && equalPlan(cp.src, p) {
		return cp, nil
	}
	cp, err := compilePlan(p, hasModel)
	if err != nil {
		return nil, err
	}
	pc.mu.Lock()
	if pc.plans == nil {
		pc.plans = make(map[string]*compiledPlan)
	}
	if _, ok := pc.plans[p.Name]; ok || len(pc.plans) < maxCachedPlans {
		pc.plans[p.Name] = cp
	}
	pc.mu.Unlock()
	return cp, nil
}

// resolvePlan finds the workspace's plan: the resolver's, else otherwise.
// A resolver panic or an invalid resolved plan is an error (the request
// fails open).
func (l *Limiter) resolvePlan(ctx context.Context, ws string) (cp *compiledPlan, err error) {
	defer func() {
		if p := recover(); p != nil {
			cp, err = nil, &PanicError{Where: "plan resolver", Value: p}
		}
	}()
	p, ok := l.cfg.plans.ResolvePlan(ctx, ws)
	if !ok {
		return l.cfg.otherwisePlan, nil
	}
	cp, err = l.planCache.compile(p, l.cfg.model != nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	return cp, nil
}

// ErrInvalidPlan is wrapped by the error a resolved plan that is not valid
// fails its request open with (FailOpenEvent.Err). The message names the
// plan's fault, never the workspace.
var ErrInvalidPlan = errors.New("llmrate: invalid plan")

// checkPlans validates WithPlans' configuration: otherwise, and the
// options it excludes.
func (c *config) checkPlans() {
	if !c.plansSet {
		return
	}
	for _, o := range []struct {
		set  bool
		name string
	}{{c.tiersSet, "WithTiers"}, {c.resolverSet, "WithTierResolver"}, {c.keyTiers != nil, "WithKeyTiers"},
		{c.modelLimits != nil, "WithModelLimits"}, {c.overrides != nil, "WithOverrides"}} {
		if o.set {
			c.fail("WithPlans", fmt.Errorf("%s beside WithPlans: a plan says what a workspace gets (the resolver answers per workspace)", o.name))
		}
	}
	cp, err := compilePlan(c.otherwise, c.model != nil)
	if err != nil {
		c.fail("WithPlans", fmt.Errorf("otherwise: %w", err))
		return
	}
	c.otherwisePlan = cp
}

// figures sets a's figures: the workspace's plan (WithPlans), else its
// tier row or override, then, for a request on a model entry, the entry's
// figures with the plan's lent (a.pk, a.pw). An error fails the
// request open.
func (l *Limiter) figures(ctx context.Context, a *admission) error {
	c := l.cfg
	models := l.models
	a.solo = l.solo
	// Where the figures come from, for an entry's request to be lent them:
	// storage that outlives the request (the limiter's rows, a compiled
	// plan), so that the store may be sent pointers to it.
	var pk, pw *Limits
	if c.plans != nil {
		cp, err := l.resolvePlan(ctx, a.ws)
		if err != nil {
			a.plan = ""
			return err
		}
		a.plan, a.wl, a.kl, models, a.named = cp.name, cp.ws, cp.keys, cp.models, true
		a.solo = a.solo && !cp.split
		pk, pw = &cp.keys, &cp.ws
	} else {
		tier := knownTier(c.resolver.ResolveTier(ctx, a.ws))
		a.tier, a.plan = tier, tier.String()
		pk, pw = &l.keyRows[tier], &l.rows[tier]
		a.wl, a.kl = *pw, *pk
		if err := l.applyOverride(ctx, a); err != nil {
			return err
		}
	}
	name, tt, ok := models.match(a.model)
	if !ok {
		return nil
	}
	if l.quotas {
		if a.overridden {
			lent := [2]Limits{a.kl, a.wl} // the override's, this request's own
			pk, pw = &lent[0], &lent[1]
		}
		a.pk, a.pw = pk, pw
	}
	a.entry = name
	a.wl = tt.For(a.tier)
	a.kl = a.wl
	return nil
}

// windowed reports whether a is held to any window (its own figures' or
// the plan's it is lent).
func (a *admission) windowed() bool {
	return windowed(a.kl, a.wl) || a.pk != nil && windowed(*a.pk, *a.pw)
}

// reconcileRequest is a's reconcile at now, charging the estimate (the
// caller sets what differs).
func (a *admission) reconcileRequest(now time.Time) ReconcileRequest {
	r := ReconcileRequest{Key: a.key, Workspace: a.ws, Model: a.entry, KeyLimits: a.kl, WorkspaceLimits: a.wl,
		Estimate: a.est, Actual: a.est, Solo: a.solo, Now: now, Admitted: a.now, ID: a.id, Receipt: a.d.Receipt}
	r.KeyPlan, r.WorkspacePlan = a.pk, a.pw
	return r
}

// seeDocs is a message's closing link to the operator's docs: "" without one.
func seeDocs(docs string) string {
	if docs == "" {
		return ""
	}
	return " See " + docs
}

// lentLimits returns the plan's figures lent to a (zero without).
func (a *admission) lentLimits() (k, w Limits) {
	if a.pk == nil {
		return Limits{}, Limits{}
	}
	return *a.pk, *a.pw
}
