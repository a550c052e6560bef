// Package llmratetest is the conformance suite for llmrate.Store
// implementations, on the model of testing/fstest.TestFS: a store's own
// tests call TestStore with a function that makes fresh stores, and the
// suite drives them through a real llmrate.Limiter and its middleware. The
// memory store (llmrate.NewMemoryStore) and the Redis store (package
// redisstore, plain, batched and leased) pass it; a Postgres, Memcached or
// any other store passes the same contract by calling
//
//	func TestConformance(t *testing.T) {
//		llmratetest.TestStore(t, func(t *testing.T, clock func() time.Time) llmrate.Store {
//			return mystore.New(connect(t), mystore.WithClock(clock))
//		})
//	}
//
// # What it checks
//
// Every subtest sends requests through the middleware (bearer keys,
// estimates from Content-Length, usage reported by a fake provider) and
// checks status codes, Retry-After and the x-ratelimit-remaining headers
// against hand-worked figures: the default tier table's worked example;
// the all-or-nothing rollback of a refused request, with the key's and the
// workspace's buckets kept apart or kept once (Solo); reconcile credits and
// debits, the reconcile bound (twice a bucket's capacity) and debt repaid
// to the microsecond; refill capped at capacity after an idle hour; a clock
// that goes backwards; tier and override changes that clamp the level with
// no reset and no free refill; two keys spending one workspace; requests
// that never fit; figures near llmrate.MaxPerMinute over years; per-model
// buckets (AdmitRequest.Model) kept apart per key and per workspace;
// shadow-mode decisions identical to enforcement's on random traces; 250
// concurrent requests admitting exactly the 200 the figures allow; and,
// calling the store directly, the Store contract's identities: an
// admission sent again with its AdmitRequest.ID is answered with its first
// decision and debited once, a reconcile sent again with its ID is applied
// once, and a refund (ReconcileRequest.Refund) gives one request and the
// estimate back to all four buckets, once.
//
// Gauges and reservations are checked through the Store interface itself,
// as a caller other than the limiter uses it: concurrency gauges
// (Limits.ConcurrentRequests) of the key and of the workspace, checked
// after the four buckets and all or nothing with them (a gauge's refusal
// debits nothing, a bucket's takes no slot), a slot held until the
// admission's reconcile (ReconcileRequest.ID) and released exactly once
// however often that reconcile is resent, a Solo key's one gauge, model
// entries' own gauges, a lowered figure counting the slots already held;
// reservations (AdmitRequest.MaxWait) debited at once and told the exact
// wait, later ones waiting behind earlier ones, a refusal past MaxWait
// whose RetryAfter counts the reservations ahead, refunds
// (ReconcileRequest.Refund) crediting a reservation back in full, and 40
// concurrent callers each told a distinct wait; windows (Limits.Windows):
// a daily quota of 1,500 requests giving one back every 57.6 s exactly
// and coming back full (no burst) when idle, a refusal naming its window
// (Decision.Window) with a RetryAfter past a minute, the input and output
// meters (AdmitRequest.InputTokens; ReconcileRequest.InputEstimate,
// InputActual, OutputActual) with each charge bounded at twice its
// bucket's figure, all or nothing with the per-minute buckets, the
// workspace's windows shared by its keys, a window bucket's identity by
// Per (a changed figure clamps, a changed Per is a new bucket), refunds
// crediting every window, and the levels reported in
// Decision.KeyWindows and WorkspaceWindows; priority reserves
// (AdmitRequest.Reserve): a reserved request stopping at the floor
// ⌈r × capacity⌉ of each per-minute bucket, of a window's bucket (an
// output meter at its floor plus 1) and of a gauge (slots kept free),
// refused with Decision.ByReserve and the wait until it fits above the
// floor, a request without a reserve spending to the bottom, a lone
// reserved class reaching exactly (1 − r) of each bucket, a request
// larger than the capacity less the floor never fitting, and
// reservations waiting until they fit above the floor. A store that lacks gauges
// or reservations must say so: its Admit returns an error wrapping
// errors.ErrUnsupported for a request that uses them (the limiter then
// fails a gauged request open, counted and logged; a request without a
// gauge that it sent with MaxWait is decided again without it, and
// MaxWait is not sent from then on), and those subtests are skipped,
// saying why.
//
// A store that is an llmrate.QuotaStore is held to plans and quotas too
// (the Quotas subtests; skipped, saying so, for any other store): an
// Unlimited per-minute figure is no bucket (never refuses, never in
// RetryAfter, Remaining 0); a calendar day in Asia/Tokyo holds its figure
// until 00:00 there, RetryAfter exact to it, Decision.Calendar and Zone
// naming it, WindowLevels.Reset its end; a session opens at its first
// admitted request (a refusal opens none), nothing refills within, and it
// is full again Per later; the plan's month and gauge lent to a model
// entry's request (AdmitRequest.KeyPlan, WorkspacePlan) hold another
// entry's and a request on no entry alike, Decision.Lent naming them, the
// reconcile releasing the lent slot; and a reconcile landing after its
// period ended carries a debit into the new period and drops a credit.
//
// # What the store must do
//
// newStore must return a fresh, empty store for each call (each subtest
// uses its own): keys are reused across subtests.
//
// Every admission the suite sends directly carries an ID
// (llmrate.NewAdmissionID) and every reconcile its admission's ID and
// Receipt.
//
// The store must read time only from the clock it is given: the suite
// moves that clock forwards by microseconds and by years, and backwards,
// and expects refill to follow it exactly. A store that reads a clock of
// its own (Redis uses the server's TIME by default) needs an option to use
// clock instead; AdmitRequest.Now and ReconcileRequest.Now carry the same
// clock's reading.
//
// A Reconcile must be visible to the next Admit once it has returned. The
// suite calls Limiter.Flush after every response, which waits for the
// reconciles the limiter queued (WithReconcileQueue); a store that buffers
// or batches writes of its own must apply them before Reconcile or Admit
// returns, or the following request's figures will not match.
//
// The suite closes every limiter when its subtest ends, and Limiter.Close
// closes the store if it has a Close(context.Context) error method: a
// store needs no cleanup of its own in newStore beyond what it owns outside
// the store value (a server, a connection pool shared across stores). An
// error from Close fails the test.
//
// A store must never fail open in the suite: a response without the
// rate-limit headers (the limiter failed open on a store error or
// timeout; the suite allows each call 2 s) fails the test.
//
// The guide to writing a store is docs/store.md at the root of this module.
package llmratetest
