package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/retryq"
	"go.uber.org/zap"
)

// Key is one of the gateway's own provider keys.
type Key struct {
	// Name identifies the key: unique among the keys, shown in logs and
	// events, and naming its buckets in the store (the workspace
	// llmrate.ReservedWorkspacePrefix+Name, "upstream:"+Name, stable across
	// processes, which the llmrate middleware refuses to its callers).
	// Never the secret.
	Name string
	// Limits are the provider's figures for this key, per minute; each in
	// [1, llmrate.MaxPerMinute], or llmrate.Unlimited where the provider
	// publishes none for that meter (an Anthropic key's input and output
	// tokens per minute are its Windows). The key's buckets hold 1× its per-minute
	// figures, as a provider's do (held as a one-minute window, combined
	// with one of Windows of that Per, each meter the tighter figure): a
	// request whose estimate exceeds TokensPerMinute never fits the key.
	// Windows (llmrate.Limits.Windows) hold the key to the provider's other
	// published limits, exactly: e.g. requests per day, or Anthropic's
	// input and output tokens per minute. The input meters are debited the
	// request's estimate and charged the reported input less cache reads;
	// the output meters are charged the reported output.
	// ConcurrentRequests, when above 0, caps the
	// key's requests in flight to the provider: a slot is held from
	// admission until the response body is read to its end or closed (or
	// the attempt fails), as the store's gauge counts it
	// (llmrate.Limits.ConcurrentRequests).
	Limits llmrate.Limits
	// Authorize sets the credential on an outgoing request (e.g. its
	// Authorization or x-api-key header). It is given a clone of the
	// caller's request, without the caller's Authorization, X-Api-Key and
	// Api-Key headers, and may modify it freely. Required.
	Authorize func(*http.Request)
}

// key is a Key with its state.
type key struct {
	Key
	ws    string         // the workspace of its buckets: llmrate.ReservedWorkspacePrefix+Name
	lim   llmrate.Limits // the figures its buckets are held to (heldLimits)
	skips skips
}

// heldLimits are the figures a key's buckets are held to: its own, with
// its per-minute figures also held as a one-minute window (capacity 1×,
// as the provider's bucket), first among its windows and combined with a
// window of its own of that Per (each meter the tighter non-zero figure).
func heldLimits(l llmrate.Limits) llmrate.Limits {
	limited := func(v int64) int64 { return max(v, 0) } // Unlimited: that meter has no minute figure
	minute := llmrate.Window{Per: time.Minute, Requests: limited(l.RequestsPerMinute), Tokens: limited(l.TokensPerMinute)}
	ws := make([]llmrate.Window, 0, len(l.Windows)+1)
	ws = append(ws, minute)
	tighter := func(a, b int64) int64 {
		if a == 0 || b != 0 && b < a {
			return b
		}
		return a
	}
	for _, w := range l.Windows {
		if w.Per == time.Minute && w.Calendar == llmrate.NoCalendar && !w.Session {
			ws[0] = llmrate.Window{Per: time.Minute, Requests: tighter(minute.Requests, w.Requests), Tokens: tighter(minute.Tokens, w.Tokens),
				InputTokens: w.InputTokens, OutputTokens: w.OutputTokens}
			continue
		}
		ws = append(ws, w)
	}
	if m := ws[0]; m.Requests == 0 && m.Tokens == 0 && m.InputTokens == 0 && m.OutputTokens == 0 {
		ws = ws[1:] // both per-minute figures Unlimited: no minute window
	}
	l.Windows = ws
	return l
}

// Transport is an http.RoundTripper that sends each request on the first
// of its keys whose buckets admit it and that the provider has not said is
// out of room, fails over to the next key on a provider 429, and charges
// each key what its responses consumed. See the package doc. It is safe
// for concurrent use.
type Transport struct {
	keys             []key
	base             http.RoundTripper
	store            llmrate.Store
	memory           bool // the store is a *llmrate.MemoryStore: calls need no deadline
	clock            func() time.Time
	maxAttempts      int
	estimator        func(*http.Request) int64
	inputEstimator   func(*http.Request) int64 // nil: the input estimate is the estimate
	defaultEstimator bool
	log              *zap.Logger
	observer         Observer
	timeout          time.Duration
	failOpens        atomic.Int64
	dropped          atomic.Int64            // reconciles never applied (retry.go)
	retry            *retryq.Queue[retryJob] // reconciles the store failed (retry.go)
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport over keys, tried in the order given. Bad input is
// a *llmrate.ConfigError (several are joined): no keys, an empty or
// duplicate Name, a nil Authorize, a figure out of [1,
// llmrate.MaxPerMinute] other than llmrate.Unlimited, a negative
// ConcurrentRequests, invalid Windows (as llmrate.Limits.Windows says: a
// calendar window, e.g. a provider's monthly cap that resets on the 1st at
// 00:00 UTC, is {Calendar: llmrate.CalendarMonth, Zone: time.UTC}), an
// Unlimited figure or a calendar or session window on a store that is not
// a llmrate.QuotaStore, or a bad option.
func New(keys []Key, opts ...Option) (*Transport, error) {
	cfg, err := newConfig(opts)
	errs := []error{err}
	if len(keys) == 0 {
		errs = append(errs, &llmrate.ConfigError{Option: "keys", Err: errors.New("none given")})
	}
	seen := make(map[string]int, len(keys))
	_, quotas := cfg.store.(llmrate.QuotaStore)
	for i, k := range keys {
		errs = append(errs, validKey(i, k, seen))
		if !quotas && k.Limits.Validate() == nil && quotaLimits(k.Limits) {
			errs = append(errs, &llmrate.ConfigError{Option: fmt.Sprintf("keys[%d]", i),
				Err: fmt.Errorf("an Unlimited figure, a calendar or a session window needs a store that keeps quotas (llmrate.QuotaStore); %T is not one", cfg.store)})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t := &Transport{
		keys:             make([]key, len(keys)),
		base:             cfg.base,
		store:            cfg.store,
		clock:            cfg.clock,
		maxAttempts:      cfg.maxAttempts,
		estimator:        cfg.estimator,
		defaultEstimator: cfg.estimator == nil,
		log:              cfg.logger,
		observer:         cfg.observer,
		timeout:          cfg.timeout,
	}
	if t.defaultEstimator {
		t.estimator = llmrate.EstimateTokens
	} else if in := llmrate.InputEstimator(cfg.estimator); reflect.ValueOf(in).Pointer() != reflect.ValueOf(cfg.estimator).Pointer() {
		t.inputEstimator = in // EstimateFromBody: the input meters get the prompt part alone
	}
	t.retry = t.newRetrier(ReconcileRetryFor, reconcileRetryFirst, maxRetrying)
	_, t.memory = cfg.store.(*llmrate.MemoryStore)
	for i, k := range keys {
		t.keys[i].Key, t.keys[i].ws, t.keys[i].lim = k, llmrate.ReservedWorkspacePrefix+k.Name, heldLimits(k.Limits)
	}
	return t, nil
}

// quotaLimits reports whether l needs a llmrate.QuotaStore.
func quotaLimits(l llmrate.Limits) bool {
	if l.RequestsPerMinute == llmrate.Unlimited || l.TokensPerMinute == llmrate.Unlimited {
		return true
	}
	for _, w := range l.Windows {
		if w.Calendar != llmrate.NoCalendar || w.Session {
			return true
		}
	}
	return false
}

// validKey checks keys[i]; seen maps the names already seen to their index.
func validKey(i int, k Key, seen map[string]int) error {
	where := fmt.Sprintf("keys[%d]", i)
	var errs []error
	if k.Name == "" {
		errs = append(errs, errors.New("empty name"))
	} else if j, dup := seen[k.Name]; dup {
		errs = append(errs, fmt.Errorf("name %q is also keys[%d]'s", k.Name, j))
	} else {
		seen[k.Name] = i
	}
	if k.Authorize == nil {
		errs = append(errs, errors.New("nil Authorize"))
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"RequestsPerMinute", k.Limits.RequestsPerMinute}, {"TokensPerMinute", k.Limits.TokensPerMinute}} {
		if f.v != llmrate.Unlimited && (f.v < 1 || f.v > llmrate.MaxPerMinute) {
			errs = append(errs, fmt.Errorf("%s %d out of range [1, %d] (or llmrate.Unlimited)", f.name, f.v, int64(llmrate.MaxPerMinute)))
		}
	}
	if c := k.Limits.ConcurrentRequests; c < 0 {
		errs = append(errs, fmt.Errorf("ConcurrentRequests %d: must not be negative (0: no cap)", c))
	}
	if len(k.Limits.Windows) > 0 {
		if err := (llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1, Windows: k.Limits.Windows}).Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &llmrate.ConfigError{Option: where, Err: errors.Join(errs...)}
}

// FailOpens returns how many times a fault let a request through
// unchecked or left an estimate standing: a store error, timeout or panic
// on admission (the key was used unreserved), a reconcile the store never
// applied (also counted in DroppedReconciles; one applied on a retry is
// not a fault), or a panicking estimator (llmrate.EstimateTokens was used
// instead).
func (t *Transport) FailOpens() int64 { return t.failOpens.Load() }

// RoundTrip sends req on the first key that can take it, as the package
// doc describes. It never modifies req, and it closes req's body on every
// path. A failure before a provider saw the request (the base
// RoundTripper's error before the request's headers were written, such as
// a dial error, or a panic in the key's Authorize, returned as a
// *llmrate.PanicError) refunds the key's reservation and is returned. When
// no key can take the request it answers a synthesized 429 (see the
// package doc), with a nil error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := round{t: t, req: req}
	defer r.body.closeOriginal()
	if err := r.body.prepare(req); err != nil {
		return nil, err
	}
	r.est = r.estimate()
	r.input = r.inputEstimate()
	for i := range t.keys {
		if r.attempts == t.maxAttempts || r.attempts > 0 && !r.body.replayable() {
			break
		}
		resp, done, err := r.try(&t.keys[i])
		if done {
			r.discardHeld()
			return resp, err
		}
	}
	if r.held != nil {
		return r.held, nil
	}
	return r.refuse(), nil
}

// round is one RoundTrip's state.
type round struct {
	t        *Transport
	req      *http.Request
	body     reqBody
	est      int64
	input    int64 // the input meters' estimate (windows): the prompt part with EstimateFromBody, else est
	model    string
	modelSet bool
	attempts int
	held     *http.Response // the latest provider 429, returned if nothing follows
	wait     time.Duration  // the soonest a key that may fit has room
	waitSet  bool           // some key may fit
	why      refusal        // what that key waits on
	tooLarge []tooLarge     // the meters and windows the request exceeds on the keys it never fits
}

// try considers key k: it skips it, or sends the request on it. done
// reports that resp (or err) is RoundTrip's answer.
func (r *round) try(k *key) (resp *http.Response, done bool, err error) {
	t := r.t
	ev := AttemptEvent{Key: k.Name, Estimate: r.est}
	now := t.clock()
	if r.noteTooLarge(k) {
		ev.Outcome, ev.NeverFits = OutcomeSkippedOwnLimit, true
		t.emit(&ev)
		return nil, false, nil
	}
	if w := k.skips.wait(now, r.modelName); w > 0 {
		r.noteWait(w, refusal{provider: true})
		ev.Outcome, ev.Wait = OutcomeSkippedProvider, w
		t.emit(&ev)
		return nil, false, nil
	}
	res, d, err := r.admit(k, now)
	switch {
	case err != nil:
		ev.FailedOpen, ev.Err = true, err
	case d.NeverFits:
		ev.Outcome, ev.NeverFits = OutcomeSkippedOwnLimit, true
		t.emit(&ev)
		return nil, false, nil
	case !d.Allowed:
		r.noteWait(d.RetryAfter, ownRefusal(k, d))
		ev.Outcome, ev.Wait = OutcomeSkippedOwnLimit, d.RetryAfter
		t.emit(&ev)
		return nil, false, nil
	}
	r.attempts++
	resp, err = r.send(k, res)
	if err != nil {
		ev.Outcome, ev.Err = OutcomeFailed, err
		t.emit(&ev)
		return nil, true, err
	}
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		// The body is the upgraded connection, which must stay writable
		// (httputil.ReverseProxy needs an io.ReadWriteCloser). Its charge
		// is the estimate: at once, or, on a key with a concurrency cap,
		// when the connection closes, as that reconcile releases the slot
		// the open session holds.
		if res != nil && k.Limits.ConcurrentRequests > 0 {
			holdUpgrade(resp, res)
		} else {
			res.settleUpgrade()
		}
	case res != nil:
		wrapBody(resp, res)
	}
	now = t.clock()
	if w, skip := providerSkip(resp.Header, resp.StatusCode, now); skip {
		k.skips.skip(now, w, r.modelName())
		ev.Wait = w
	}
	ev.Status = resp.StatusCode
	if resp.StatusCode == http.StatusTooManyRequests {
		ev.Outcome = OutcomeProvider429
		t.emit(&ev)
		r.discardHeld()
		r.held = resp
		return nil, false, nil
	}
	ev.Outcome = OutcomeAdmitted
	t.emit(&ev)
	return resp, true, nil
}

// admit reserves the request's estimate in k's buckets. A store fault
// returns its error and no reservation: the key is used unchecked.
func (r *round) admit(k *key, now time.Time) (*reservation, llmrate.Decision, error) {
	t := r.t
	// An identity lets a shared store answer a resent admission once; the
	// memory store, called in process, loses no reply, and would only keep
	// a record of it: it gets one only where a gauge needs it to name the
	// slot its reconcile releases.
	var id string
	if !t.memory || k.Limits.ConcurrentRequests > 0 {
		id = llmrate.NewAdmissionID()
	}
	d, err := callStore(t, r.req.Context(), "admit", func(ctx context.Context) (llmrate.Decision, error) {
		return t.store.Admit(ctx, llmrate.AdmitRequest{
			Key: k.ws, Workspace: k.ws, KeyLimits: k.lim, WorkspaceLimits: k.lim,
			Tokens: r.est, InputTokens: r.input, Solo: true, Now: now, ID: id,
		})
	})
	if err != nil {
		t.fault("admit", k.Name, err)
		return nil, d, err
	}
	if !d.Allowed {
		return nil, d, nil
	}
	return &reservation{t: t, k: k, ctx: r.req.Context(), id: id, receipt: d.Receipt, est: r.est, input: r.input, in: r.input}, d, nil
}

// send sends one attempt on k. An error before the provider saw the request
// refunds res (nil when the key is used unchecked); one after charges the
// estimate.
func (r *round) send(k *key, res *reservation) (*http.Response, error) {
	var wrote atomic.Bool
	out, err := r.attemptRequest(k, &wrote)
	if err != nil {
		res.refund()
		return nil, err
	}
	r.body.sent()
	resp, err := r.t.base.RoundTrip(out)
	if err != nil {
		if wrote.Load() {
			res.settleError()
		} else {
			res.refund()
		}
		return nil, err
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	resp.Request = r.req // not the clone, which holds the key's credential
	return resp, nil
}

// attemptRequest returns a fresh clone of the caller's request for key k,
// its credential set by k's Authorize; wrote is set once its headers were
// written.
func (r *round) attemptRequest(k *key, wrote *atomic.Bool) (out *http.Request, err error) {
	ctx := httptrace.WithClientTrace(r.req.Context(), &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	out = r.req.Clone(ctx)
	if out.Header == nil {
		out.Header = make(http.Header)
	}
	out.Header.Del("Authorization")
	out.Header.Del("X-Api-Key")
	out.Header.Del("Api-Key")
	if err := r.body.attach(out); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			r.body.unsent(out)
			out, err = nil, &llmrate.PanicError{Where: "upstream key " + k.Name + " Authorize", Value: p}
		}
	}()
	k.Authorize(out)
	return out, nil
}

// estimate returns the request's token estimate: the estimator's, on a
// copy of the request whose body it may read.
func (r *round) estimate() (est int64) {
	t := r.t
	if t.defaultEstimator {
		return max(1, r.body.length/4)
	}
	defer func() {
		if p := recover(); p != nil {
			t.fault("estimate", "", &llmrate.PanicError{Where: "estimator", Value: p})
			est = max(1, r.body.length/4)
		}
	}()
	return max(1, t.estimator(r.probe()))
}

// inputEstimate returns the estimate the key's input tokens meters
// (Limits.Windows) are debited: with llmrate.EstimateFromBody as the
// estimator, the prompt part of its estimate alone (llmrate.InputEstimator),
// else the estimate. A panic falls back to the estimate, counted.
func (r *round) inputEstimate() (in int64) {
	t := r.t
	if t.inputEstimator == nil {
		return r.est
	}
	defer func() {
		if p := recover(); p != nil {
			t.fault("estimate", "", &llmrate.PanicError{Where: "input estimator", Value: p})
			in = r.est
		}
	}()
	return max(0, t.inputEstimator(r.probe()))
}

// modelName returns the model the request names (its top-level JSON
// "model", as llmrate.ModelFromBody reads it), read once, when first asked.
func (r *round) modelName() string {
	if !r.modelSet {
		r.model, _ = llmrate.ModelFromBody()(r.probe())
		r.modelSet = true
	}
	return r.model
}

// probe returns a shallow copy of the caller's request whose body reads the
// bytes read ahead (all of them when the body was buffered).
func (r *round) probe() *http.Request {
	p := new(http.Request)
	*p = *r.req
	p.Body, p.GetBody, p.ContentLength = r.body.probe(), nil, r.body.length
	return p
}

// noteWait records that a key has room for the request in w, refused by
// why until then: the soonest such wait is the synthesized 429's.
func (r *round) noteWait(w time.Duration, why refusal) {
	if !r.waitSet || w < r.wait {
		r.wait, r.waitSet, r.why = w, true, why
	}
}

// discardHeld drains (a little, so its connection may be reused) and
// closes the provider 429 held so far, if any.
func (r *round) discardHeld() {
	if r.held == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, r.held.Body, 64<<10)
	_ = r.held.Body.Close()
	r.held = nil
}

// emit reports one key's outcome to the observer and the log.
func (t *Transport) emit(ev *AttemptEvent) {
	if t.observer != nil {
		t.observer.Attempted(*ev)
	}
	lvl := zap.DebugLevel
	if ev.Outcome == OutcomeFailed {
		lvl = zap.WarnLevel
	}
	if ce := t.log.Check(lvl, "upstream: attempt"); ce != nil {
		ce.Write(zap.String("upstream_key", ev.Key), zap.Stringer("outcome", ev.Outcome), zap.Int64("estimate", ev.Estimate),
			zap.Duration("wait", ev.Wait), zap.Bool("never_fits", ev.NeverFits), zap.Bool("failed_open", ev.FailedOpen),
			zap.Int("status", ev.Status), zap.Error(ev.Err))
	}
}

// fault counts and logs a fault of the limiter's own (never the key's
// credential: the key appears by name).
func (t *Transport) fault(op, keyName string, err error) {
	t.failOpens.Add(1)
	t.log.Warn("upstream: fault; failing open", zap.String("op", op), zap.String("upstream_key", keyName), zap.Error(err))
}

// callStore runs one store call: bounded by the store timeout, not
// cancelled with the request (a reconcile must land after the client left),
// a panic returned as a *llmrate.PanicError. The memory store is called
// directly.
func callStore[T any](t *Transport, parent context.Context, op string, f func(context.Context) (T, error)) (v T, err error) {
	ctx := parent
	if !t.memory {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(parent), t.timeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			err = &llmrate.StoreError{Op: op, Err: &llmrate.PanicError{Where: "store", Value: p}}
		}
	}()
	if v, err = f(ctx); err != nil {
		err = &llmrate.StoreError{Op: op, Err: err}
	}
	return v, err
}
