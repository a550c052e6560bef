package llmrate

import (
	"time"

	"github.com/llmrate/llmrate/usage"
)

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
	// Evicted is called when the limiter's store dropped a bucket that was
	// not yet full (the memory store at its WithMaxKeys bound, or a store
	// falling back on one; see EvictionNotifier), whichever limiter sharing
	// that store caused it. It may run on another limiter's request.
	Evicted()
}

// DecisionEvent describes one admission decision.
type DecisionEvent struct {
	Allowed bool
	Refused Bucket // the first bucket without room; meaningful when !Allowed
	// Window is the refusing bucket's window (Decision.Window):
	// time.Minute for the four per-minute buckets, a window's Per for a
	// window's bucket (Limits.Windows); 0 when allowed or refused by a
	// gauge.
	Window time.Duration
	// Calendar, Zone and Session complete Window as the refusing window's
	// identity (Decision.Calendar, Zone, Session): a calendar window's
	// Window is 0. Lent is true when the refusing window or gauge is the
	// plan's, holding a model entry's request (Decision.Lent).
	Calendar Calendar
	Zone     string
	Session  bool
	Lent     bool
	Tier     Tier
	// Plan is the name of the plan the request was held to: the plan's
	// Name under WithPlans, else the tier's name ("free").
	Plan string
	// Named is true under WithPlans: Plan is the operator's plan, and Tier
	// (Free) means nothing.
	Named bool
	// Model is the ModelLimits entry whose buckets the request spent, as
	// configured (e.g. "gpt-4o*"); "" for the default buckets.
	Model      string
	Estimate   int64
	RetryAfter time.Duration // what the 429 says, whole seconds; 0 when Allowed
	NeverFits  bool
	// Shadow is true on every decision made under WithShadow: a decision
	// with Allowed false was let through, not refused.
	Shadow bool
	// Wait, when Allowed, is the reservation's wait (WithMaxWait): how long
	// the request is held before the next handler sees it (in shadow mode:
	// would be held). Decided is called before the wait. 0: it fits now.
	Wait time.Duration
	// Class is the request's priority class (WithPriority) when it is a
	// key of the reserves; "" otherwise, and without WithPriority. A name
	// not in the reserves is never reported: it may come from the client.
	Class string
}

// ReconcileKind says which case of the charge rule applied to a response.
type ReconcileKind uint8

const (
	// ReconcileUsage: the provider reported its final usage and the
	// response completed; the charge is exactly that usage.
	ReconcileUsage ReconcileKind = iota
	// ReconcilePartial: usage was reported, but not final usage on a
	// completed response (Anthropic's message_start alone, or any report on
	// a response cut off). The charge is the reported input tokens (the
	// estimate if no input was reported) plus the larger of the reported
	// output tokens and the generated text's bytes ÷ 4.
	ReconcilePartial
	// ReconcileEstimated: no usage was reported. The charge is the estimate
	// plus the generated text's bytes ÷ 4: an error body (no generated
	// text) charges the estimate.
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
	Plan     string // as DecisionEvent.Plan
	Named    bool   // as DecisionEvent.Named
	Estimate int64  // debited at admission
	Actual   int64  // the charge that replaced it (before bucket bounds)
	Reported Usage  // zero unless Kind is ReconcileUsage or ReconcilePartial
	// Cut: the response was cut off (client gone, write error, handler
	// panic, stream stopped mid-event or mid-message), its body could not
	// be wholly decoded (Undecoded), or an event stream carried an
	// exception (Exception).
	Cut bool
	// GeneratedBytes is the bytes of generated text in the body's complete
	// documents (the string values of members such as content, text,
	// delta; the full list is in usage/providers.go).
	GeneratedBytes int64
	// Undecoded is nil, or a *DecodeError: the body's Content-Encoding is
	// one llmrate does not decode (unknown, or a chain such as "gzip, br"),
	// or decoding stopped part-way (corrupt or truncated bytes, a zstd
	// window above 8 MiB, more than 64 MiB decoded, a corrupt event-stream
	// message). What was decoded before counts; the rest of the body is
	// not read, so the response counts as cut and, when nothing was read,
	// the estimate stands (Kind ReconcileEstimated). Counted by
	// Limiter.Undecoded and logged at debug.
	Undecoded error
	// Exception is the :exception-type (or :error-code) of the first
	// exception or error message of an AWS event stream, "" if none; its
	// payload is never read as usage.
	Exception string
}

// DecodeError reports a response body whose encoding was not, or not
// wholly, decoded (ReconcileEvent.Undecoded): Coding is the
// Content-Encoding as declared, or "application/vnd.amazon.eventstream"
// for an event stream whose framing failed; Reason says why.
type DecodeError = usage.DecodeError

// FailOpenEvent describes a fault that let a request through unchecked.
type FailOpenEvent struct {
	Op  string // "admit", "reconcile" or "limits"
	Err error  // a *StoreError, a *PanicError or an error wrapping ErrInvalidOverride; never quotes a raw key
	// Plan is the request's plan's name (DecisionEvent.Plan) when it was
	// known; "" for a plan that could not be resolved or was invalid.
	Plan string
}
