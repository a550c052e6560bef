package llmrate

import (
	"context"
	"errors"
	"fmt"
)

// OverrideResolver gives a workspace figures of its own (e.g. an Enterprise
// contract's numbers) in place of its tier's. ok is false for a workspace
// without an override. It is called once per admission: it must be fast and
// safe for concurrent use (keep overrides in memory, refreshed out of band).
type OverrideResolver interface {
	Override(ctx context.Context, workspace string) (lim Limits, ok bool)
}

// OverrideResolverFunc adapts a function to OverrideResolver.
type OverrideResolverFunc func(ctx context.Context, workspace string) (Limits, bool)

// Override calls f.
func (f OverrideResolverFunc) Override(ctx context.Context, workspace string) (Limits, bool) {
	return f(ctx, workspace)
}

// WithOverrides sets per-workspace overrides. A workspace with an override
// is held to its figures instead of its tier's, on its default buckets (a
// ModelLimits entry's buckets keep the entry's figures): its own buckets
// and, by default, its keys'; with WithKeyTiers each key figure is the
// lower of the key tier's and the override's (for ConcurrentRequests, the
// lower non-zero one: 0 sets no cap), and their windows pair by Per, each
// meter taking the lower non-zero figure (a window, or a meter, on one
// side only is kept as it is). The limits endpoint reports
// the override's figures, for Enterprise too.
//
// An override is checked on every use like any figure (each in
// [1, MaxPerMinute], its windows as Limits.Windows says): an invalid one
// fails open for that request (counted
// in FailOpens, logged, reported to the observer with an error that wraps
// ErrInvalidOverride). Changing an override keeps each bucket's level,
// clamped to the new capacity. A resolver that panics fails open too.
// Default: none. nil is an error.
func WithOverrides(r OverrideResolver) Option {
	return optionFunc(func(c *config) {
		if r == nil {
			c.fail("WithOverrides", errNil)
		}
		c.overrides = r
	})
}

// ErrInvalidOverride is the cause of a fail-open when an OverrideResolver
// returned figures out of range.
var ErrInvalidOverride = errors.New("llmrate: invalid override")

// override looks up the workspace's override. ok is false when there is
// none; err is set (wrapping ErrInvalidOverride, never naming the
// workspace) when there is one out of range.
func (l *Limiter) override(ctx context.Context, ws string) (lim Limits, ok bool, err error) {
	if l.cfg.overrides == nil {
		return Limits{}, false, nil
	}
	lim, ok = l.cfg.overrides.Override(ctx, ws)
	if !ok {
		return Limits{}, false, nil
	}
	if err := lim.validate(); err != nil {
		return Limits{}, false, fmt.Errorf("%w: %w", ErrInvalidOverride, err)
	}
	if lim.quotas() && !l.quotas {
		return Limits{}, false, fmt.Errorf("%w: an Unlimited figure, a calendar or a session window needs a store that keeps quotas (llmrate.QuotaStore)", ErrInvalidOverride)
	}
	return lim, true, nil
}

// applyOverride holds a workspace with an override to its figures on the
// default buckets. It returns an error (the request then fails open) for
// an invalid override.
func (l *Limiter) applyOverride(ctx context.Context, a *admission) error {
	o, ok, err := l.override(ctx, a.ws)
	if err != nil || !ok {
		return err
	}
	a.overridden = true
	a.wl = o
	a.kl = o
	if kt := l.cfg.keyTiers; kt != nil {
		k := kt.For(a.tier)
		a.kl = Limits{RequestsPerMinute: tighterRate(k.RequestsPerMinute, o.RequestsPerMinute), TokensPerMinute: tighterRate(k.TokensPerMinute, o.TokensPerMinute),
			ConcurrentRequests: tighterCap(k.ConcurrentRequests, o.ConcurrentRequests), Windows: combineWindows(k.Windows, o.Windows)}
	}
	return nil
}

// tighterCap combines two concurrency figures: the lower non-zero one
// (0 sets no cap).
func tighterCap(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// tighterRate combines two per-minute figures: the lower one, Unlimited
// yielding to any figure.
func tighterRate(a, b int64) int64 {
	switch {
	case a == Unlimited:
		return b
	case b == Unlimited:
		return a
	}
	return min(a, b)
}
