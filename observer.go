package llmrate

import "time"

// Observer receives the limiter's events, synchronously on the request's
// goroutine (FailedOpen for a queued reconcile: on the worker that applied
// it): implementations must be fast and safe for concurrent use (e.g.
// increment Prometheus counters). Events never carry a raw API key or a
// workspace name (by default a workspace is its key).
type Observer interface {
	// Decided is called for every admission decision the store made.
	Decided(DecisionEvent)
	// Reconciled is called after every admitted response.
	Reconciled(ReconcileEvent)
	// FailedOpen is called when a fault let a request through unchecked.
	FailedOpen(FailOpenEvent)
	// Evicted is called when the memory store dropped a bucket that was not
	// yet full because it was at its MaxKeys bound.
	Evicted()
}

// DecisionEvent describes one admission decision.
type DecisionEvent struct {
	Allowed bool
	Refused Bucket // the first bucket without room; meaningful when !Allowed
	Tier    Tier
	// Model is the ModelLimits entry whose buckets the request spent, as
	// configured (e.g. "gpt-4o*"); "" for the default buckets.
	Model      string
	Estimate   int64
	RetryAfter time.Duration // what the 429 says, whole seconds; 0 when Allowed
	NeverFits  bool
	// Shadow is true on every decision made under WithShadow: a decision
	// with Allowed false was let through, not refused.
	Shadow bool
}

// ReconcileKind says what a reconcile was based on.
type ReconcileKind uint8

const (
	// ReconcileUsage: the provider's usage report, from a complete response.
	ReconcileUsage ReconcileKind = iota
	// ReconcilePartial: the usage seen before the response was cut off.
	ReconcilePartial
	// ReconcileEstimated: no usage was reported; the estimate stands, or, for
	// a response cut off before any usage, the estimate plus the streamed
	// bytes ÷ 4.
	ReconcileEstimated
)

// String returns "usage", "partial" or "estimated".
func (k ReconcileKind) String() string {
	switch k {
	case ReconcileUsage:
		return "usage"
	case ReconcilePartial:
		return "partial"
	}
	return "estimated"
}

// ReconcileEvent describes one reconcile.
type ReconcileEvent struct {
	Kind     ReconcileKind
	Tier     Tier
	Estimate int64 // debited at admission
	Actual   int64 // the charge that replaced it (before bucket bounds)
	Reported Usage // zero unless Kind is ReconcileUsage or ReconcilePartial
	Cut      bool  // the response was cut off (client gone, write error, handler panic, stream stopped mid-event)
}

// FailOpenEvent describes a fault that let a request through unchecked.
type FailOpenEvent struct {
	Op  string // "admit", "reconcile" or "limits"
	Err error  // a *StoreError, a *PanicError or an error wrapping ErrInvalidOverride; never quotes a raw key
}
