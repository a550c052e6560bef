package llmrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate/internal/retryq"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Limiter enforces requests-per-minute and tokens-per-minute limits. It is
// safe for concurrent use; build one with New and share it.
type Limiter struct {
	cfg       *config
	mem       *MemoryStore // the store, when it is the in-process one
	log       *zap.Logger
	debug     *zap.Logger // sampled, for refusals
	failOpens atomic.Int64
	models    *modelTable // WithModelLimits, compiled; nil: none
	trackers  sync.Pool
	solo      bool // each key is its own workspace, with equal figures (a plan with Keys is not)
	quotas    bool // the store is a QuotaStore: an entry's request is sent the plan's figures it is also held to
	planCache planCache
	// rows and keyRows are each tier's figures for the workspace and for
	// its keys (WithKeyTiers, else the workspace's): an entry's request is
	// lent a pointer to them.
	rows, keyRows [tierCount]Limits

	shadowRefusals atomic.Int64
	shed           atomic.Int64 // WithMaxInFlight: requests shed (in shadow mode: would have been)
	inFlight       atomic.Int64 // WithMaxInFlight: slots taken
	undecoded      atomic.Int64
	usageShown     atomic.Int64 // WithStreamUsage: usage chunks an encoded stream showed the client
	waiting        atomic.Int64 // requests holding a place among the waiters (wait.go)
	storeNoWait    atomic.Bool  // the store said it makes no reservations (wait.go)

	calib     *calibration // WithCalibration; nil: off
	primeBody bool         // ModelFromBody and EstimateFromBody: one scan for both
	bodyEst   bool         // the estimator is EstimateFromBody: the input estimate is its prompt part

	calls     *storeCaller                // the store, when it is not the memory store
	rq        *reconcileQueue             // nil: reconciles run on the request's goroutine
	retry     *retryq.Queue[reconcileJob] // reconciles the store failed, tried again; nil for the memory store
	closeOnce sync.Once

	stopObserving func() // unsubscribes the observer from the store's evictions and counters (storestats.go); nil when not subscribed
}

// New returns a Limiter configured by opts. Every option has a safe
// default; an invalid one makes New return a *ConfigError (joined, when
// several are invalid).
func New(opts ...Option) (*Limiter, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{cfg: c, log: c.logger, models: c.models, solo: c.workspace == nil && c.keyTiers == nil}
	_, l.quotas = c.store.(QuotaStore)
	for t := range Tier(tierCount) {
		l.rows[t] = c.tiers.For(t)
		l.keyRows[t] = l.rows[t]
		if c.keyTiers != nil {
			l.keyRows[t] = c.keyTiers.For(t)
		}
	}
	if c.calibrate {
		l.calib = newCalibration()
	}
	l.primeBody = sameFunc(c.model, modelFromBody) && sameFunc(c.estimator, EstimateFromBody())
	l.bodyEst = sameFunc(c.estimator, EstimateFromBody())
	l.debug = c.logger
	if c.logger.Core() != zapcore.NewNopCore() {
		// A sampler holds ~230 KB of counters: none for a logger that
		// never writes (the default), which a limiter per tenant or per
		// reload would otherwise pay at every New.
		l.debug = c.logger.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(core, time.Second, 10, 100)
		}))
	}
	if m, ok := c.store.(*MemoryStore); ok {
		l.mem = m
	}
	if stop := observeStore(c.store, c.observer); stop != nil {
		l.stopObserving = stop // Close stops it too
		unsubscribeWhenCollected(l, stop)
	}
	if l.mem == nil {
		l.calls = newStoreCaller(c.store, c.timeout, c.maxStoreCalls)
		l.retry = newRetrier(l)
		if c.reconcileQueue > 0 {
			l.rq = newReconcileQueue(l, c.reconcileQueue)
		}
	}
	l.trackers.New = func() any { return newTracker(l) }
	return l, nil
}

// Middleware is shorthand for New(opts...) followed by (*Limiter).Middleware.
// It panics if the configuration is invalid; use New to get the error.
func Middleware(opts ...Option) func(http.Handler) http.Handler {
	l, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return l.Middleware
}

// FailOpens returns how many requests passed unchecked, or were not
// reconciled, because the limiter's own state faulted.
func (l *Limiter) FailOpens() int64 { return l.failOpens.Load() }

// Undecoded returns how many admitted responses had a body that could not
// be decoded, or not wholly (ReconcileEvent.Undecoded): an unknown or
// chained Content-Encoding, a corrupt, truncated or oversized encoded body,
// or a corrupt event stream. Their charge is the estimate, plus what was
// read before the failure.
func (l *Limiter) Undecoded() int64 { return l.undecoded.Load() }

// Middleware returns next wrapped by the limiter: each request is admitted
// against its four buckets before next sees it, refused with a 429 when a
// bucket has no room, and reconciled with the provider's reported usage
// after next returns.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.serve(w, r, next)
	})
}

// admission is what the limiter decided about one request.
type admission struct {
	key, ws string
	tier    Tier
	// pk and pw are, for a request on a model entry, the plan's figures
	// (tier row, override, or Plan) the entry sits under: their windows and
	// gauges hold the request as well (AdmitRequest.KeyPlan,
	// WorkspacePlan). They point to storage that outlives the request (the
	// store may be sent them) and is never written. nil otherwise.
	pk, pw *Limits
	solo   bool // AdmitRequest.Solo
	named  bool // the plan is WithPlans' (messages say "plan", not "tier")
	// plan is the name of the plan in force (DecisionEvent.Plan): the
	// tier's name without WithPlans.
	plan   string
	kl, wl Limits
	est    int64 // debited: the estimator's, at least 1, scaled by WithCalibration
	raw    int64 // the estimator's, at least 1, before scaling: what a response without usage is charged from
	// input is the input estimate debited from the windows' InputTokens
	// meters (Limits.Windows): raw, or with EstimateFromBody its prompt
	// part alone; never scaled. Set only when the figures carry windows.
	input int64
	now   time.Time
	d     Decision
	// Policies (model.go, override.go): the request's model, the
	// ModelLimits entry whose buckets it spends ("" : the default buckets),
	// and whether an override set the figures.
	model      string
	entry      string
	overridden bool
	// id is the admission's identity (AdmitRequest.ID): always with a
	// non-memory store, and with the memory store when a gauge is in force;
	// gauged is set when a gauge was in force, so that an admitted request
	// holds slots that its reconcile releases.
	id     string
	gauged bool
	// waits is set when the request holds a place among the waiters and
	// must wait d.Wait before it is forwarded (wait.go).
	waits bool
	// class is the request's priority class when it is a key of
	// WithPriority's reserves ("" otherwise), reserve its reserve in
	// millionths (AdmitRequest.Reserve).
	class   string
	reserve int64
}

func (l *Limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if n := l.cfg.maxInFlight; n > 0 {
		if !l.takeSlot(int64(n)) {
			if l.shedRequest(w, r) {
				next.ServeHTTP(w, r) // shadow mode: passes, undecided
			}
			return
		}
		// Given back when next returns, panics included (a hijacked
		// connection's handler returns too).
		defer l.inFlight.Add(-1)
	}
	var a admission
	status, code, msg, fault := l.identify(r, &a)
	if fault == nil && status == 0 {
		status, code, msg, fault = l.identifyModel(r, &a)
	}
	if fault != nil {
		l.failOpen(&a, "admit", fault)
		next.ServeHTTP(w, r)
		return
	}
	if status != 0 {
		writeError(w, r, status, "invalid_request_error", code, msg)
		return
	}
	if !l.admit(r, &a) {
		next.ServeHTTP(w, r) // fail open
		return
	}
	if !a.d.Allowed {
		if l.cfg.shadow {
			l.passShadow(w, r, &a, next)
			return
		}
		l.refuse(w, r, &a)
		return
	}
	if a.waits && !l.waitTurn(w, r, &a) {
		return // its client left while it waited: refunded
	}
	t := l.trackers.Get().(*tracker)
	t.start(w, r, &a)
	if l.cfg.streamUse {
		t.inject = injectStreamUsage(r, DefaultMaxInjectBody)
	}
	done := false
	defer func() {
		// Runs on a handler panic too, without recovering it: net/http (or
		// an outer recoverer) sees the panic unchanged, and the reservation
		// is still settled.
		l.finish(t, r, !done)
	}()
	next.ServeHTTP(t.wrapped, r)
	done = true
}

// identify extracts the key and workspace. A non-zero status means the
// request is refused as bad client input; fault is set when an extractor
// panicked (a limiter fault: the request fails open).
func (l *Limiter) identify(r *http.Request, a *admission) (status int, code, msg string, fault error) {
	defer func() {
		if p := recover(); p != nil {
			status, fault = 0, &PanicError{Where: "extractor", Value: p}
		}
	}()
	key, err := l.cfg.key(r)
	if err != nil || key == "" {
		return http.StatusUnauthorized, "missing_api_key", "You didn't provide an API key. Provide it in an Authorization header (Bearer auth) or an x-api-key header.", nil
	}
	a.key, a.ws = key, key
	if l.cfg.workspace != nil {
		ws, err := l.cfg.workspace(r)
		if err != nil || ws == "" {
			return http.StatusUnauthorized, "missing_workspace", "The request does not identify a workspace.", nil
		}
		a.ws = ws
	}
	if reservedWorkspace(a.ws) {
		return http.StatusUnauthorized, "invalid_api_key", reservedMsg, nil
	}
	if l.cfg.class != nil {
		a.class, a.reserve = l.cfg.classOf(r)
	}
	return 0, "", "", nil
}

// admit resolves the tier, estimates and asks the store. ok is false when
// the limiter faulted and the request must fail open.
//
// A request that may wait (WithMaxWait) keeps its place among the waiters
// only when admit sets a.waits: waitTurn gives it back.
func (l *Limiter) admit(r *http.Request, a *admission) (ok bool) {
	placed := false
	defer func() {
		if p := recover(); p != nil {
			l.failOpen(a, "admit", &PanicError{Where: "admission", Value: p})
			ok = false
		}
		if a.waits = placed && ok && a.d.Allowed && a.d.Wait > 0 && !l.cfg.shadow; placed && !a.waits {
			l.waiting.Add(-1)
		}
	}()
	ctx := r.Context()
	if err := l.figures(ctx, a); err != nil {
		l.failOpen(a, "admit", err)
		return false
	}
	l.estimate(r, a)
	var req AdmitRequest
	l.admitRequest(a, &req)
	if l.cfg.maxWait > 0 {
		if placed = l.takeWaitPlace(); placed {
			req.MaxWait = l.cfg.maxWait
		}
	}
	var err error
	if l.mem != nil {
		// In process: no reply can be lost, so the ID (set under a gauge)
		// only names the slots its reconcile releases, and no identity
		// record is kept for it.
		a.d, err = l.mem.admitAny(&req)
	} else {
		err = l.decide(ctx, a, &req)
	}
	if err != nil {
		l.failOpen(a, "admit", &StoreError{Op: "admit", Err: err})
		return false
	}
	if !a.d.Allowed && a.d.Window == 0 && a.d.Calendar == NoCalendar && a.d.Refused < KeyConcurrent {
		// A store that predates windows names no window: its buckets are
		// the per-minute ones.
		a.d.Window = time.Minute
	}
	if o := l.cfg.observer; o != nil && !l.observeDecided(a, o, decisionEvent(a, l.cfg.shadow)) && !a.d.Allowed {
		return false // a fault refuses nothing: the request passes, counted
	}
	return true
}

// estimate sets a's token estimates: the raw one (the estimator's, at
// least 1), the one debited (scaled by calibration, if any) and, under
// windows, the input estimate.
func (l *Limiter) estimate(r *http.Request, a *admission) {
	a.raw = max(1, l.cfg.estimator(r))
	a.est = a.raw
	if l.calib != nil {
		a.est = l.calib.scale(a.ws, a.model, a.raw)
		// Whether a request ever fits is decided on its raw estimate: a
		// learned ratio neither turns a request that fits a full bucket
		// into one that never fits (held to the smallest tokens capacity,
		// windows' included) nor the reverse (a raw estimate past it is
		// debited unscaled).
		// With a priority reserve, the capacity is what the reserve
		// leaves: ⌊(1 − r) × capacity⌋ grows with the capacity, so the
		// smallest bucket's is the smallest.
		pk, pw := a.lentLimits()
		c := smallestTokensCapacity(a.kl, a.wl, pk, pw)
		c -= ReserveFloor(a.reserve, c)
		if a.raw > c {
			a.est = a.raw
		} else if a.est > c {
			a.est = c
		}
	}
	if a.windowed() {
		a.input = a.raw
		if l.bodyEst {
			a.input = inputFromBody(r)
		}
	}
}

// admitRequest fills req, zero, with a's admission as of the limiter's
// clock (read now, into a.now), with an ID under a gauge; MaxWait is the
// caller's.
func (l *Limiter) admitRequest(a *admission, req *AdmitRequest) {
	a.now = l.cfg.clock()
	// Field by field into the caller's zero request: a composite literal
	// through the pointer is built aside, then copied.
	req.Key, req.Workspace, req.Model, req.KeyLimits, req.WorkspaceLimits = a.key, a.ws, a.entry, a.kl, a.wl
	req.Tokens, req.InputTokens, req.Solo, req.Now, req.Reserve = a.est, a.input, a.solo, a.now, a.reserve
	req.KeyPlan, req.WorkspacePlan = a.pk, a.pw
	if a.kl.ConcurrentRequests > 0 || a.wl.ConcurrentRequests > 0 || a.pk != nil && (a.pk.ConcurrentRequests > 0 || a.pw.ConcurrentRequests > 0) {
		// Its slots are released by the reconcile carrying this identity.
		a.gauged = true
		req.ID = NewAdmissionID()
		a.id = req.ID
	}
}

// decide asks a store other than the memory store to decide req, into
// a.d: through the store call (timeout, retries), with an identity, and
// again without a max wait when it makes no reservations.
func (l *Limiter) decide(ctx context.Context, a *admission, req *AdmitRequest) error {
	var err error
	if req.ID == "" {
		req.ID = NewAdmissionID()
		a.id = req.ID
	}
	a.d, err = l.calls.admit(ctx, *req)
	if err != nil && req.MaxWait > 0 && !a.gauged && errors.Is(err, errors.ErrUnsupported) {
		// The store makes no reservations: decide as without a max wait.
		// (Under a gauge the error may be about the gauge: that request
		// fails open, and MaxWait stays on.)
		l.noReservations(err)
		req.MaxWait = 0
		a.d, err = l.calls.admit(ctx, *req)
	}
	return err
}

// decisionEvent is the observer's event for a's decision.
func decisionEvent(a *admission, shadow bool) DecisionEvent {
	ev := DecisionEvent{Allowed: a.d.Allowed, Refused: a.d.Refused, Window: a.d.Window, Calendar: a.d.Calendar, Zone: a.d.Zone, Session: a.d.Session, Lent: a.d.Lent, Tier: a.tier, Plan: a.plan, Named: a.named, Model: a.entry, Estimate: a.est, NeverFits: a.d.NeverFits, Shadow: shadow, Class: a.class}
	if a.d.Allowed {
		ev.Wait = a.d.Wait
	} else {
		ev.RetryAfter = time.Duration(retryAfterSeconds(a.d)) * time.Second
	}
	return ev
}

// observeDecided calls o.Decided, and reports false when it panicked: a
// fault, counted and logged. The decision itself stands: an admitted
// request goes on and is reconciled (releasing its slots, settling its
// reservation); a refused one was debited nothing, and passes as any fault
// lets a request pass.
func (l *Limiter) observeDecided(a *admission, o Observer, ev DecisionEvent) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			l.failOpen(a, "observer", &PanicError{Where: "observer Decided", Value: p})
			ok = false
		}
	}()
	o.Decided(ev)
	return true
}

// failOpen counts and logs a fault that let a request through.
func (l *Limiter) failOpen(a *admission, op string, err error) {
	l.failOpens.Add(1)
	if ce := l.log.Check(zap.WarnLevel, "llmrate: failing open"); ce != nil {
		ce.Write(zap.String("op", op), zap.String("key_fp", Fingerprint(a.key)), planField(a), zap.Error(err))
	}
	if o := l.cfg.observer; o != nil {
		o.FailedOpen(FailOpenEvent{Op: op, Err: err, Plan: a.plan})
	}
}

// Fingerprint returns a short, stable, non-reversible fingerprint of an API
// key (8 hex digits of its SHA-256), the only form in which llmrate ever
// logs a key.
func Fingerprint(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:4])
}

// finish reconciles an admitted request once its handler has returned (or
// panicked). It never panics out and never touches the response.
func (l *Limiter) finish(t *tracker, r *http.Request, panicked bool) {
	a := &t.a
	if !t.close() {
		l.finishBusy(t)
		return
	}
	defer func() {
		if p := recover(); p != nil {
			l.failOpen(a, "reconcile", &PanicError{Where: "reconcile", Value: p})
		}
		t.release()
		l.trackers.Put(t)
	}()
	t.endBody()
	res := t.scanned()
	cut := panicked || t.writeErr || t.hijacked || r.Context().Err() != nil || res.Cut()
	actual, charged := l.charge(a, res, cut)
	ev := ReconcileEvent{Tier: a.tier, Plan: a.plan, Named: a.named, Estimate: a.est, Actual: actual, Cut: cut, GeneratedBytes: res.GeneratedBytes,
		Undecoded: res.DecodeErr, Exception: res.Exception}
	if ev.Undecoded != nil {
		l.undecoded.Add(1)
		if ce := l.debug.Check(zap.DebugLevel, "llmrate: response body not decoded"); ce != nil {
			ce.Write(zap.String("key_fp", Fingerprint(a.key)), zap.Error(ev.Undecoded))
		}
	}
	switch {
	case res.Complete(cut):
		ev.Kind, ev.Reported = ReconcileUsage, res.Usage
	case res.Reported:
		ev.Kind, ev.Reported = ReconcilePartial, res.Usage
	default:
		ev.Kind = ReconcileEstimated
	}
	if l.calib != nil && charged && ev.Kind == ReconcileUsage {
		l.calib.record(a.ws, a.model, a.raw, ev.Actual)
	}
	t.sendTrailers(ev.Actual)
	windows := a.windowed()
	if ev.Actual != a.est || a.gauged || windows {
		// The clock is read again: the charge lands when the response ended,
		// as it does on a store with its own clock. A gauged admission is
		// reconciled whatever its charge: the reconcile releases its slots.
		// Windows' input and output meters are charged apart (§18).
		req := a.reconcileRequest(l.cfg.clock())
		req.Actual = ev.Actual
		if windows {
			u := chargedUsage(res, a.input, cut)
			req.InputEstimate, req.InputActual, req.OutputActual = a.input, max(0, u.InputTokens-u.CachedInputTokens), max(0, u.OutputTokens)
		}
		l.reconcile(r.Context(), a, &req)
	}
	if ce := l.debug.Check(zap.DebugLevel, "llmrate: reconciled"); ce != nil {
		ce.Write(zap.String("key_fp", Fingerprint(a.key)), zap.Stringer("kind", ev.Kind), zap.Int64("estimate", ev.Estimate),
			zap.Int64("actual", ev.Actual), zap.Bool("cut", ev.Cut), zap.Int64("generated_bytes", ev.GeneratedBytes))
	}
	if o := l.cfg.observer; o != nil {
		o.Reconciled(ev)
	}
}

// finishBusy ends a use whose writer is still being written, by a goroutine
// of the handler, after the handler returned (net/http forbids that too).
// That call still holds the tracker: it is not read and not pooled again,
// and the admission's estimate stands, as for a body that cannot be read.
func (l *Limiter) finishBusy(t *tracker) {
	a := &t.a
	if ce := l.log.Check(zap.WarnLevel, "llmrate: response written after its handler returned; not scanned"); ce != nil {
		ce.Write(zap.String("key_fp", Fingerprint(a.key)), zap.Int64("estimate", a.est))
	}
	if a.gauged {
		// The estimate stands; the reconcile only releases the slots.
		req := a.reconcileRequest(l.cfg.clock())
		req.InputEstimate, req.InputActual = a.input, a.input
		l.reconcile(context.Background(), a, &req)
	}
	if o := l.cfg.observer; o != nil {
		o.Reconciled(ReconcileEvent{Kind: ReconcileEstimated, Tier: a.tier, Plan: a.plan, Named: a.named, Estimate: a.est, Actual: a.est, Cut: true})
	}
}
