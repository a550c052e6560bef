package llmrate

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"math/bits"
	"time"
)

// Bucket names one of the four per-minute buckets a request is checked
// against, in admission order, one of the two concurrency gauges checked
// after them (Limits.ConcurrentRequests), or a window's input or output
// meter (Limits.Windows). A window's requests and tokens meters are named
// by KeyRequests, KeyTokens, WorkspaceRequests and WorkspaceTokens, with
// Decision.Window telling which window.
type Bucket uint8

// The four buckets, in the order they are checked and debited, then the two
// gauges, checked after the buckets in the same atomic step: a request
// refused by any of the six takes nothing from any.
const (
	KeyRequests Bucket = iota
	KeyTokens
	WorkspaceRequests
	WorkspaceTokens
	// KeyConcurrent is the key's gauge: its requests in flight at once
	// (the key's Limits.ConcurrentRequests).
	KeyConcurrent
	// WorkspaceConcurrent is the workspace's gauge: its requests in flight
	// at once, all its keys together.
	WorkspaceConcurrent
	// KeyInputTokens is a key's window's input meter (Window.InputTokens):
	// debited the input estimate at admission (AdmitRequest.InputTokens),
	// charged the reported input less cache reads.
	KeyInputTokens
	// KeyOutputTokens is a key's window's output meter
	// (Window.OutputTokens): debited nothing at admission (a request is
	// admitted while it holds at least 1), charged the reported output.
	KeyOutputTokens
	// WorkspaceInputTokens is KeyInputTokens for the workspace's windows.
	WorkspaceInputTokens
	// WorkspaceOutputTokens is KeyOutputTokens for the workspace's windows.
	WorkspaceOutputTokens
)

var bucketNames = [...]string{"key_requests", "key_tokens", "workspace_requests", "workspace_tokens", "key_concurrent", "workspace_concurrent",
	"key_input_tokens", "key_output_tokens", "workspace_input_tokens", "workspace_output_tokens"}

// String returns the bucket's snake_case name, e.g. "workspace_tokens",
// suitable as a metric label.
func (b Bucket) String() string {
	if int(b) < len(bucketNames) {
		return bucketNames[b]
	}
	return "unknown"
}

// Scope returns "key" or "workspace".
func (b Bucket) Scope() string {
	switch b {
	case KeyRequests, KeyTokens, KeyConcurrent, KeyInputTokens, KeyOutputTokens:
		return "key"
	}
	return "workspace"
}

// Concurrent reports whether b is a concurrency gauge (KeyConcurrent or
// WorkspaceConcurrent) rather than a per-minute bucket.
func (b Bucket) Concurrent() bool { return b == KeyConcurrent || b == WorkspaceConcurrent }

// Tokens reports whether b is a tokens bucket (else a requests bucket): a
// request debits it by its token estimate rather than by one. It is false
// for the input and output meters (see Meter).
func (b Bucket) Tokens() bool { return b == KeyTokens || b == WorkspaceTokens }

// Meter returns what b counts: "requests", "tokens", "input tokens",
// "output tokens", or "concurrent requests" for a gauge.
func (b Bucket) Meter() string {
	switch b {
	case KeyRequests, WorkspaceRequests:
		return "requests"
	case KeyTokens, WorkspaceTokens:
		return "tokens"
	case KeyInputTokens, WorkspaceInputTokens:
		return "input tokens"
	case KeyOutputTokens, WorkspaceOutputTokens:
		return "output tokens"
	case KeyConcurrent, WorkspaceConcurrent:
		return "concurrent requests"
	}
	return "unknown"
}

// PerMinute returns bucket b's per-minute figure, given the key's figures
// key and the workspace's figures workspace (as in AdmitRequest.KeyLimits
// and WorkspaceLimits): the bucket refills at this rate per minute and holds
// twice it when full. A gauge has no per-minute figure: 0 (see Figure).
func (b Bucket) PerMinute(key, workspace Limits) int64 {
	if b.Concurrent() {
		return 0
	}
	switch b {
	case KeyRequests:
		return key.RequestsPerMinute
	case KeyTokens:
		return key.TokensPerMinute
	case WorkspaceRequests:
		return workspace.RequestsPerMinute
	case WorkspaceTokens:
		return workspace.TokensPerMinute
	}
	return 0 // the input and output meters exist only in windows
}

// Figure returns b's figure given the key's and the workspace's figures:
// PerMinute for a bucket, ConcurrentRequests for a gauge (0: no cap), 0
// for an input or output meter (a window's: see Window.Figure).
func (b Bucket) Figure(key, workspace Limits) int64 {
	switch b {
	case KeyConcurrent:
		return key.ConcurrentRequests
	case WorkspaceConcurrent:
		return workspace.ConcurrentRequests
	}
	return b.PerMinute(key, workspace)
}

// AdmitRequest is one admission: one request and Tokens tokens, checked
// against the key's and the workspace's buckets.
type AdmitRequest struct {
	// Key identifies the key's buckets within Workspace. Stores must not
	// persist or log it raw (the memory store keeps only a seeded hash; the
	// Redis store a keyed hash).
	Key       string
	Workspace string
	// Model names the set of buckets the request spends: "" for the key's
	// and workspace's default buckets, else the name of a ModelLimits entry
	// as configured (e.g. "gpt-4o" or "gpt-4o*"; every model one prefix
	// entry matches shares its buckets). A store must keep each Model's
	// buckets apart from every other Model's, per key and per workspace,
	// exactly as it keeps keys and workspaces apart: see Store.
	Model string
	// KeyLimits and WorkspaceLimits are the figures in force now. A store
	// keeps levels, not figures: a change clamps the level to the new
	// capacity, with no reset and no free refill.
	KeyLimits       Limits
	WorkspaceLimits Limits
	// Tokens is the token estimate to debit (at least 1): from the four
	// per-minute tokens buckets, and from every window's Tokens meter.
	Tokens int64
	// InputTokens is the input estimate to debit from every window's
	// InputTokens meter (KeyInputTokens, WorkspaceInputTokens), at least 0:
	// the request's estimate, or with EstimateFromBody its prompt part
	// alone (without the max_tokens allowance), never scaled by
	// calibration. It debits nothing else. A window's OutputTokens meter
	// (KeyOutputTokens, WorkspaceOutputTokens) is debited nothing at
	// admission: it admits while it holds at least 1. Without windows in
	// KeyLimits or WorkspaceLimits, stores ignore it.
	InputTokens int64
	// Solo reports that the key is its own workspace and no other key can
	// spend that workspace, with equal figures: the limiter's default
	// (no WithWorkspace, no WithKeyTiers). The key's buckets and the
	// workspace's then hold the same levels at every instant, so a store may
	// keep them once; decisions are identical either way.
	Solo bool
	// Now is the limiter's clock. Stores with a clock of their own (Redis
	// uses the server's TIME) may ignore it.
	Now time.Time
	// ID is this admission's identity, unique per admission (the limiter
	// sets it from NewAdmissionID for every store but the memory store,
	// which loses no reply, and for the memory store too under a gauge, to
	// name the slots its reconcile releases; direct callers should set it). A store that is
	// sent an ID it has already admitted answers with that first decision
	// and debits nothing again, so a caller (or its client library) may
	// resend an admission whose reply was lost; a refusal debited nothing,
	// so a store need not remember it (a repeat is decided afresh). Its
	// reconcile carries the same ID. "" means no identity: the admission
	// must not be resent. See Store for how long identities are kept.
	// An admission under a gauge (ConcurrentRequests > 0 in KeyLimits or
	// WorkspaceLimits) must have an ID, with every store: the reconcile
	// carrying it releases the slots it took (see Store); a store refuses
	// to take slots for an admission without one (an error, not a
	// decision).
	ID string
	// MaxWait is how long the caller is willing to hold the request for a
	// reservation (WithMaxWait): a request that does not fit now but would
	// fit every bucket (windows included) within MaxWait is debited now and answered Allowed
	// with Decision.Wait > 0. Zero: no reservations, refuse as usual.
	// Reservations are served in the order the store decided them: each
	// debits the buckets at once (they may go below zero), so a later
	// request on the same buckets is told a longer wait and never overtakes
	// an earlier one (a credit landing meanwhile goes to the bucket, not to
	// the waiters: a later request may then fit at once). A gauge never waits: a request it refuses is refused
	// at once, and a reservation holds its slots while it waits.
	MaxWait time.Duration
	// Reserve is the share of every bucket and gauge kept from this
	// request's priority class (WithPriority), in whole millionths: 0 (no
	// reserve, the default) to 999,999. A request with Reserve r is
	// admitted only if, after its debit, every bucket it spends (the four
	// per-minute buckets and every window's, as in the order above) still
	// holds at least its floor, ⌈r × capacity / 1,000,000⌉ in whole units
	// (capacity: twice the per-minute figure for the four per-minute
	// buckets, the figure for a window's), and every gauge it takes keeps
	// at least ⌈r × figure / 1,000,000⌉ slots free after taking its own. An
	// OutputTokens meter (debited nothing) must hold at least its floor
	// plus 1. Floors are computed in exact integers. Decision.Refused
	// names the first bucket (in the order above), or else gauge, without
	// room above its floor, with Decision.ByReserve set when that one had
	// room for the request itself; RetryAfter is then the wait until it
	// fits above the floor in every bucket (a gauge's: 1 s). A request
	// with a reserve is never granted a reservation, whatever its MaxWait:
	// a reservation is debited now, so it would leave a bucket below its
	// floor; it is refused instead. A request larger than some
	// bucket's capacity less its floor never fits (Decision.NeverFits); a
	// gauge never sets NeverFits, even one whose floor leaves no slot (a
	// figure of 1 keeps its one slot from any reserve).
	// Stores that hand out local capacity (Redis leases) decide a request
	// with a reserve on the shared state, never from a lease. Stores
	// written before reserves ignore it: do not combine such a store with
	// WithPriority.
	Reserve int64
	// KeyPlan and WorkspacePlan are, for a request on a model entry
	// (Model != ""), the figures of the plan the entry sits under (the
	// workspace's plan, tier row or override; the key's under
	// Plan.Keys or WithKeyTiers): an entry adds, it replaces only the
	// per-minute buckets. Their Windows and ConcurrentRequests hold the
	// request as well as the entry's own, on the default buckets' identity
	// (Model ""), so that a plan's quota and gauge hold its traffic on
	// every model; their per-minute figures are not read. nil for a
	// request without an entry (both are set, or neither). For a Solo
	// request the two are one set, kept once as the workspace's. Only a
	// QuotaStore is sent them; a store must not change them, nor keep the
	// pointers past the call.
	KeyPlan, WorkspacePlan *Limits
}

// QuotaStore is implemented by a store that keeps the store contract of
// plans and quotas: Unlimited per-minute figures (no bucket), calendar and
// session windows (Window.Calendar, Window.Session) with the reconcile
// rules below, and the plan's windows and gauges lent to a model entry's
// traffic (AdmitRequest.KeyPlan, WorkspacePlan). New refuses WithPlans,
// Unlimited figures, calendar and session windows, and model entries under
// figures with windows or gauges, on a store that is not one (a
// *ConfigError): a quota is never silently missing. The memory store and
// the Redis store are QuotaStores; llmratetest holds a store to the
// contract.
//
// Calendar and session windows: a window bucket identified as any window's
// (see the notes after AdmitRequest), with Calendar, the zone's name and
// Session in its identity. A calendar window's bucket holds what was spent
// in the period in force by the store's clock (period boundaries: 00:00 in
// the Zone of each day, Monday or 1st; 23 and 25 h days at DST changes)
// and is full at each period's start; a session window's opens at the
// first admission into an unused one and is full again Per after it; a
// refusal never opens one. RetryAfter for such a bucket is the exact time
// until it has room (its period's or session's end), not capped at
// MaxRetryAfter. A reconcile lands in the period (or session) of its
// admission (ReconcileRequest.Admitted, or the store's own instant of the
// admission in its Receipt); one arriving after that period
// ended lands a debit still owed (a positive WindowDelta) in the current
// period, opening a session if none is open, and drops a credit. A figure
// changed within a period keeps what was spent (remaining = figure −
// spent; in debt above it).
//
// Reservations (AdmitRequest.MaxWait) are never granted across a calendar
// period's start or a session's end, by both built-in stores: a request
// that would wait for one is refused, RetryAfter the time to that boundary
// (the client retries then, and its charge lands in the new period), and
// so is one whose wait for its rolling buckets would end at or past the
// end of a period or session it spends (debited in the period it waits
// in, it would run in the next, which starts full). One whose wait ends
// within every such period waits as usual.
type QuotaStore interface {
	Store
	// Quotas marks the implementation; it is never called.
	Quotas()
}

// Peeker is implemented by a store that can report a request's levels
// without deciding it: the limits endpoint's remaining (LimitsHandler with
// ShowRemaining). The memory store and the Redis store are Peekers.
type Peeker interface {
	// Peek returns the levels Admit would find for req now, in one read,
	// debiting nothing, taking no slot and opening no session:
	// Decision.Remaining (0 for an Unlimited figure), KeyWindows,
	// WorkspaceWindows and Plan (with Reset for calendar and session
	// windows); the other fields are unset. A bucket never seen reads full.
	Peek(ctx context.Context, req AdmitRequest) (Decision, error)
}

// MaxReserve is the largest AdmitRequest.Reserve: 999,999 millionths.
const MaxReserve = 999_999

// ReserveFloor returns the floor a reserve of r millionths keeps in a
// bucket (or gauge) of capacity c: ⌈r × c / 1,000,000⌉, exact for every c
// ≥ 0 and r in [0, MaxReserve]; 0 when r ≤ 0. A reserve above MaxReserve
// is MaxReserve's, as the stores decide it: the floor is never above c.
func ReserveFloor(r, c int64) int64 {
	if r <= 0 || c <= 0 {
		return 0
	}
	r = min(r, MaxReserve) // so r × c < 10^6 × 2^64: Div64 cannot overflow
	hi, lo := bits.Mul64(uint64(r), uint64(c))
	q, rem := bits.Div64(hi, lo, 1_000_000)
	if rem != 0 {
		q++
	}
	return int64(q) // ≤ c since r < 1,000,000
}

// Windows (Limits.Windows) in a Store. KeyLimits.Windows are the key's
// windows and WorkspaceLimits.Windows the workspace's (for a Solo request
// the two are one set, kept once as the workspace's). Each non-zero figure
// of a window is one bucket, identified by (scope, Model, meter, Per):
// (Key, Workspace, Model, meter, Per) for the key's, (Workspace, Model,
// meter, Per) for the workspace's, the meter being one of WindowMeters. A
// window bucket's capacity is its figure (Window.Figure) and it refills
// the figure per Per, continuously and exactly as the per-minute buckets
// refill theirs per minute; a bucket never seen is full. A changed figure
// keeps the level clamped to the new capacity; a changed Per is another
// bucket (the old one is simply no longer used, and full once refilled).
// A store never drops a window bucket in debt before time alone has
// refilled it.
//
// Admit checks the window buckets in the same atomic step as the four
// per-minute buckets and the gauges, all or nothing, in the order: the
// four per-minute buckets, the key's windows (in KeyLimits.Windows order;
// in each: requests, tokens, input, output), the workspace's windows (in
// WorkspaceLimits.Windows order), the gauges. An allowed admission debits
// one request from each Requests meter, Tokens from each Tokens meter,
// InputTokens from each InputTokens meter and nothing from the
// OutputTokens meters (which need a level of at least 1). A request that
// needs more than a window bucket's capacity (Tokens above a Tokens
// figure, InputTokens above an InputTokens figure) never fits
// (Decision.NeverFits). Reconcile applies the window charges with the
// per-minute tokens charge, atomically (see ReconcileRequest).

// Decision is the outcome of an admission.
type Decision struct {
	// Allowed is true when all four buckets had room (or, with
	// AdmitRequest.MaxWait, will have within Wait) and were debited, and
	// every gauge in force had a free slot, now taken.
	Allowed bool
	// Refused is the first bucket or gauge, in the order KeyRequests,
	// KeyTokens, WorkspaceRequests, WorkspaceTokens (per minute), the key's
	// windows, the workspace's windows (see Store), KeyConcurrent,
	// WorkspaceConcurrent, that had no room. A window's requests and tokens
	// meters refuse as KeyRequests, KeyTokens, WorkspaceRequests,
	// WorkspaceTokens, its input and output meters as KeyInputTokens,
	// KeyOutputTokens, WorkspaceInputTokens, WorkspaceOutputTokens; Window
	// says which window. Meaningful only when Allowed is false.
	Refused Bucket
	// Window is the refusing bucket's window: the window's Per for a
	// window's bucket (Limits.Windows); time.Minute, or 0, for the four
	// per-minute buckets (a store may leave it 0 there, as every store
	// written before windows does, and the built-in stores do for figures
	// without windows: the limiter reads 0 with one of the four as
	// time.Minute); 0 when Allowed or refused by a gauge.
	Window time.Duration
	// RetryAfter is the time until the refused request would fit in every
	// bucket, capped at MaxRetryAfter, or, for a window bucket whose Per is
	// longer than MaxRetryAfter, that bucket's wait capped at its Per (the
	// largest of the buckets' capped waits); at least one second when a
	// gauge refused (a slot frees when some response in flight ends). Zero when
	// Allowed. The memory store gives it exactly; a store may round it up
	// to whole seconds (the Redis store does), which is the precision of
	// the Retry-After header the middleware sends (whole seconds, rounded
	// up) either way.
	RetryAfter time.Duration
	// NeverFits is true when the request is larger than some bucket's whole
	// capacity (less its floor, with AdmitRequest.Reserve): it cannot be
	// admitted however long it waits.
	NeverFits bool
	// ByReserve is true when the refusal came from the request's reserve
	// (AdmitRequest.Reserve): Refused would have had room for the request,
	// but not above the floor its class leaves for other traffic. False
	// when Allowed or without a reserve.
	ByReserve bool
	// Lent is true when the refusing window or gauge is the plan's
	// (AdmitRequest.KeyPlan, WorkspacePlan), lent to a model entry's
	// request, rather than the entry's own.
	Lent bool
	// Calendar, Zone and Session complete Window as the refusing window's
	// identity: its Window.Calendar, its zone's name, and Window.Session.
	// Zero when the refusing bucket is not such a window. (Beside the other
	// flags: a Decision is copied on every admission, and these fit where
	// they cost nothing.)
	Calendar Calendar
	Session  bool
	// Remaining holds each bucket's whole-unit level after the decision
	// (after the debit when Allowed), indexed by Bucket. It may be negative
	// while a bucket is in debt (a reservation leaves it so). Gauges are
	// not reported here.
	Remaining [4]int64
	// KeyWindows and WorkspaceWindows hold each window bucket's whole-unit
	// level after the decision, indexed as AdmitRequest.KeyLimits.Windows
	// and WorkspaceLimits.Windows (nil without windows; a meter a window
	// does not limit reads 0). For a Solo request both are the same
	// buckets' levels.
	KeyWindows, WorkspaceWindows []WindowLevels
	// Wait, when Allowed, is how long the caller must hold the request
	// before forwarding it: a reservation (AdmitRequest.MaxWait), at most
	// MaxWait, already debited. Zero for an admission that fits now. A
	// caller that does not forward it after all (its client left) credits
	// it back with a reconcile whose Refund is set.
	Wait time.Duration
	// Plan holds the levels of the windows of AdmitRequest.KeyPlan and
	// WorkspacePlan (nil without them, or when they have no windows). A
	// pointer: a Decision is copied on every admission, and most have none.
	Plan *PlanLevels
	// Zone is the refusing calendar window's zone's name (see Calendar).
	Zone string
	// Receipt is the store's own note of how it decided this admission
	// (which of its stores decided it, the lease generation it spent...).
	// Callers pass it back unchanged in ReconcileRequest.Receipt; a store
	// that needs none leaves it "".
	Receipt string
}

// PlanLevels is Decision.Plan: the whole-unit levels of the windows of the
// plan's figures lent to a model entry's request, after the decision.
// KeyWindows is indexed as AdmitRequest.KeyPlan.Windows and
// WorkspaceWindows as WorkspacePlan.Windows; for a Solo request both are
// the same buckets' levels.
type PlanLevels struct {
	KeyWindows, WorkspaceWindows []WindowLevels
}

// planLevels returns d's lent windows' levels (nil, nil without).
func (d *Decision) planLevels() (key, workspace []WindowLevels) {
	if d.Plan == nil {
		return nil, nil
	}
	return d.Plan.KeyWindows, d.Plan.WorkspaceWindows
}

// ReconcileRequest replaces an admission's token estimate by the tokens the
// provider reported. Requests buckets never reconcile. A reconcile also ends
// its admission: it releases the gauge slots the admission with the same ID
// took (see Store), so a caller reconciles every admission that may hold
// slots, even when Actual equals Estimate.
type ReconcileRequest struct {
	Key             string
	Workspace       string
	Model           string // as in AdmitRequest: the buckets admission debited
	KeyLimits       Limits
	WorkspaceLimits Limits
	// Estimate is what admission debited (AdmitRequest.Tokens) from the
	// per-minute tokens buckets and the windows' Tokens meters.
	Estimate int64
	// Actual is the charge that replaces it. Each bucket bounds it at twice
	// its own capacity before applying Actual-Estimate.
	Actual int64
	// InputEstimate is what admission debited from the windows'
	// InputTokens meters (AdmitRequest.InputTokens), and InputActual the
	// charge that replaces it: the reported input tokens less cache reads
	// (the input estimate when none was reported). Each InputTokens bucket
	// adds its bounded InputActual less InputEstimate (WindowDelta).
	InputEstimate, InputActual int64
	// OutputActual is the charge for the windows' OutputTokens meters
	// (admission debited them nothing): the reported output tokens, or the
	// larger of those and the generated text's bytes ÷ 4 when the report
	// is missing or partial. Each OutputTokens bucket adds it, bounded
	// (WindowDelta).
	OutputActual int64
	Solo         bool // as in AdmitRequest
	Now          time.Time
	// KeyPlan and WorkspacePlan are the admission's
	// (AdmitRequest.KeyPlan, WorkspacePlan): the plan's windows the charge
	// also lands in, and the gauges whose slots the ID releases.
	KeyPlan, WorkspacePlan *Limits
	// Admitted is the admission's AdmitRequest.Now: calendar and session
	// windows land the charge in the period it was admitted in (see
	// QuotaStore). A store with a clock of its own (Redis) keeps its own
	// instant of the admission in Decision.Receipt instead. Zero: Now.
	Admitted time.Time
	// ID is the admission's AdmitRequest.ID. A store applies a reconcile
	// (or refund) with a given non-empty ID at most once, whatever the
	// caller (or its client library) resends: a caller may retry one whose
	// outcome it does not know (the limiter retries a failed reconcile for
	// 5 s). It releases the admission's gauge slots at most once.
	ID string
	// Receipt is the admission's Decision.Receipt, unchanged.
	Receipt string
	// Refund credits the admission back in full, as if it had been refused:
	// one request to each requests bucket (windows' included), Estimate
	// tokens to each tokens bucket and windows' Tokens meter, InputEstimate
	// to each windows' InputTokens meter, nothing to the OutputTokens
	// meters; Actual, InputActual and OutputActual are ignored. For a request that never reached
	// the provider, or a reservation whose client left while it waited.
	Refund bool
}

// NewAdmissionID returns a fresh admission identity: 128 random bits,
// base64url-encoded (22 bytes).
func NewAdmissionID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// MaxRetryAfter is the largest Retry-After llmrate sends. A store reports
// longer waits as exactly this.
const MaxRetryAfter = 60 * time.Second

// Store holds bucket state. Implementations must be safe for concurrent use
// and must return promptly once ctx is done (the limiter bounds every call
// to a non-memory store by its store timeout and fails open past it).
//
// Admit checks and debits all four buckets atomically, all or nothing: a
// refused request changes no bucket. Reconcile applies one reconcile to both
// tokens buckets atomically. With windows (Limits.Windows), the windows'
// buckets are part of both steps: see AdmitRequest and the notes on
// windows after it.
//
// Identity: an admission with an ID (AdmitRequest.ID) that the store has
// admitted is answered, when sent again, with that first decision, and
// debits nothing again; a reconcile with an ID (ReconcileRequest.ID) is
// applied at most once; a refund (ReconcileRequest.Refund) is a reconcile.
// A store keeps an admission's identity at least as long as a caller may
// resend it (the built-in stores: 5 s; the limiter resends within its store
// timeout) and a reconcile's longer than a caller retries it (the built-in
// stores: 30 s; the limiter retries for 5 s). A reconcile goes back to the
// store that decided its admission (Decision.Receipt says which, for a
// store of stores such as Redis with a local fallback). llmratetest checks
// all of this.
//
// A bucket's identity is (Key, Workspace, Model) for the key's buckets and
// (Workspace, Model) for the workspace's: a store must fold Model into both
// (the memory store hashes it with the key and workspace; the Redis store
// adds a keyed hash of it to the key names). A store written before Model
// existed, which ignores it, stays correct for every limiter without
// WithModelLimits (Model is then always ""), but with model limits it would
// spend every model entry's traffic on the default buckets, clamped to
// whichever figures the latest request carried: do not combine such a
// store with WithModelLimits.
//
// Gauges (Limits.ConcurrentRequests > 0): Admit checks them after the four
// buckets, in the same atomic step, and an admission it allows takes one
// slot of each gauge in force, the key's (Key, Workspace, Model) and the
// workspace's (Workspace, Model); for a Solo request the two are one slot.
// The slots belong to the admission's ID until a Reconcile carrying that ID
// (and the admission's Key, Workspace and Model) releases them, exactly
// once: a repeated reconcile releases nothing more. A figure changed while
// slots are held counts them against the new figure. A store shared by
// processes also frees the slots of a process that stopped reconciling
// (died, or lost the store) after a bounded time, and never before while
// that process lives (the Redis store: redisstore.WithSlotTTL). An
// admission whose reply the limiter never got (past its store timeout: the
// request fails open) is never reconciled: a slot the store took for it
// is held until the store frees it so, as a dead process's would be.
type Store interface {
	Admit(ctx context.Context, req AdmitRequest) (Decision, error)
	Reconcile(ctx context.Context, req ReconcileRequest) error
}

// BoundedActual returns the charge that replaces Estimate in tokens bucket
// b: Actual bounded below at 0 and above at twice the bucket's capacity
// (four times its tokens-per-minute figure), so one absurd report leaves a
// bucket at most minutes in debt. A store adds BoundedActual(b) - Estimate
// to bucket b's level.
func (r ReconcileRequest) BoundedActual(b Bucket) int64 {
	f := b.PerMinute(r.KeyLimits, r.WorkspaceLimits)
	if f == Unlimited {
		return max(r.Actual, 0) // no bucket: nothing to bound it by
	}
	return boundActual(r.Actual, 2*f)
}

// WindowDelta returns what a reconcile adds to the debt of window w's
// bucket for meter b (one of WindowMeters; positive: a further debit,
// negative: a credit back): for a Tokens meter BoundedActual-Estimate with
// the charge bounded at twice w's Tokens figure, for an InputTokens meter
// the same with InputActual and InputEstimate, for an OutputTokens meter
// OutputActual bounded; 0 for a Requests meter (requests never reconcile).
// A refund (Refund) gives -1, -Estimate, -InputEstimate and 0. A store
// subtracts it from the bucket's level, the level floored at minus twice
// the capacity and capped at the capacity, as a per-minute tokens bucket's
// is.
func (r ReconcileRequest) WindowDelta(b Bucket, w Window) int64 {
	f := w.Figure(b)
	if f == 0 {
		return 0
	}
	switch b {
	case KeyRequests, WorkspaceRequests:
		if r.Refund {
			return -1
		}
	case KeyTokens, WorkspaceTokens:
		if r.Refund {
			return -r.Estimate
		}
		return boundActual(r.Actual, f) - r.Estimate
	case KeyInputTokens, WorkspaceInputTokens:
		if r.Refund {
			return -r.InputEstimate
		}
		return boundActual(r.InputActual, f) - r.InputEstimate
	case KeyOutputTokens, WorkspaceOutputTokens:
		if r.Refund {
			return 0
		}
		return boundActual(r.OutputActual, f)
	}
	return 0
}

// boundActual bounds a reported charge at twice a bucket's capacity.
func boundActual(actual, capacity int64) int64 {
	if actual > 2*capacity {
		return 2 * capacity
	}
	if actual < 0 {
		return 0
	}
	return actual
}
