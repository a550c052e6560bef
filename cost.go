package llmrate

import (
	"reflect"

	"github.com/llmrate/llmrate/usage"
)

// charge returns what a response consumed, the estimate debited for it
// being a.est: the provider's final usage, or the §5 rule's input + output
// (see ReconcileEvent) with the raw estimate as the unreported input (what
// WithCalibration learned never changes a charge), through the
// WithTokenCost function when one is set. ok is false when that function panicked: a limiter fault, counted
// and logged; the estimate then stands.
func (l *Limiter) charge(a *admission, res usage.Result, cut bool) (actual int64, ok bool) {
	cost := l.cfg.cost
	if cost == nil {
		return res.Charge(a.raw, cut), true
	}
	defer func() {
		if p := recover(); p != nil {
			l.failOpen(a, "reconcile", &PanicError{Where: "token cost", Value: p})
			actual, ok = a.est, false
		}
	}()
	return max(0, cost(a.model, chargedUsage(res, a.raw, cut))), true
}

// chargedUsage is the Usage the charge rule builds (docs/cost.md, "Estimate and reconcile" and "Options that change what a request costs"): the
// reported usage when it is final on a completed response; otherwise input
// is the reported input when input was reported, else the estimate, and
// output the larger of the reported output and ⌊GeneratedBytes / 4⌋, with
// the breakdown fields (cached, cache-write and reasoning tokens) the
// reported ones when input was reported, else 0.
func chargedUsage(res usage.Result, estimate int64, cut bool) usage.Usage {
	if res.Complete(cut) {
		return res.Usage
	}
	u := usage.Usage{InputTokens: estimate, OutputTokens: max(res.Usage.OutputTokens, res.GeneratedBytes/4)}
	if res.InputReported {
		u.InputTokens = res.Usage.InputTokens
		u.CachedInputTokens = res.Usage.CachedInputTokens
		u.CacheWriteTokens = res.Usage.CacheWriteTokens
		u.ReasoningTokens = res.Usage.ReasoningTokens
	}
	return u
}

// sameFunc reports whether two function values run the same top-level
// function (as New recognises ModelFromBody and EstimateFromBody, to scan a
// body once for both). nil is no function.
func sameFunc[F any](a, b F) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return !va.IsNil() && va.Pointer() == vb.Pointer()
}
