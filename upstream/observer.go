package upstream

import (
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/usage"
)

// Observer receives the Transport's events, synchronously on the goroutine
// of the RoundTrip (Attempted) or of the body's Read or Close (Reconciled;
// for a reconcile the store failed at first, the Transport's retry
// goroutine or Close): implementations must be fast and safe for
// concurrent use. Events name a key by its Name, never its credential.
type Observer interface {
	// Attempted is called once for every key a request considered, in
	// order: skipped, or tried and answered (or failed).
	Attempted(AttemptEvent)
	// Reconciled is called once for every reservation settled: the charge
	// that replaced the estimate, or a refund; once it was applied, or once
	// it was dropped (ReconcileEvent.Err).
	Reconciled(ReconcileEvent)
}

// Outcome is what became of one key for one request.
type Outcome uint8

const (
	// OutcomeAdmitted: the key's buckets admitted the request (or the store
	// failed, see AttemptEvent.FailedOpen) and the provider answered it
	// with something other than a 429. Its response is the one returned.
	OutcomeAdmitted Outcome = iota
	// OutcomeSkippedOwnLimit: the key's own buckets had no room (or never
	// will: AttemptEvent.NeverFits). Not an attempt: nothing was sent.
	OutcomeSkippedOwnLimit
	// OutcomeSkippedProvider: the provider said earlier that the key has no
	// room (a 429, or rate-limit headers saying 0 remaining) until a time
	// not yet reached. Not an attempt: nothing was sent.
	OutcomeSkippedProvider
	// OutcomeProvider429: the provider answered 429. The key is skipped
	// until the provider's retry time; the next key is tried, if any may be.
	OutcomeProvider429
	// OutcomeFailed: the attempt failed (the base RoundTripper returned an
	// error, or the key's Authorize panicked); RoundTrip returns the error.
	OutcomeFailed
)

var outcomeNames = [...]string{"admitted", "skipped_own_limit", "skipped_provider", "provider_429", "failed"}

// String returns the outcome's snake_case name, e.g. "skipped_provider",
// suitable as a metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// AttemptEvent describes what became of one key for one request.
type AttemptEvent struct {
	Key      string // the key's Name
	Outcome  Outcome
	Estimate int64 // the request's token estimate
	// Wait is how long until the key may have room, for a skip or a
	// provider 429 (0 when unknown or not applicable).
	Wait time.Duration
	// NeverFits: a skip because the request exceeds the whole capacity of
	// one of the key's buckets, each held to its figure: its estimate
	// above the key's TokensPerMinute or a window's Tokens, or its input
	// estimate above a window's InputTokens.
	NeverFits bool
	// FailedOpen: the store failed (Err says why) and the key was used
	// unchecked; no reservation was made, so none is reconciled.
	FailedOpen bool
	// Status is the provider's HTTP status for OutcomeAdmitted and
	// OutcomeProvider429, else 0.
	Status int
	// Err is the attempt's error (OutcomeFailed) or the store's fault
	// (FailedOpen); nil otherwise.
	Err error
}

// ReconcileEvent describes one settled reservation.
type ReconcileEvent struct {
	Key      string // the key's Name
	Kind     llmrate.ReconcileKind
	Estimate int64 // debited at admission
	// Actual is the charge that replaced the estimate (before the store's
	// bound of twice the bucket's capacity); 0 for a refund.
	Actual int64
	// Refund: the request never reached the provider and was credited back
	// in full, its request and its tokens.
	Refund bool
	// Cut: the body was closed before its end (and before a stream's
	// terminal event), ended mid-event, or could not be wholly decoded.
	Cut      bool
	Reported usage.Usage // the usage the provider reported; zero if none
	// Retries is how many times the reconcile was tried again after the
	// store failed it (see Transport.Close).
	Retries int
	// Err is the store's last fault when the reconcile was dropped, never
	// applied (counted in FailOpens and DroppedReconciles): the estimate
	// stands. nil when it was applied, on a retry or not.
	Err error
}
