package llmrate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// MaxMaxWait is the longest wait WithMaxWait accepts: the longest
// Retry-After llmrate sends.
const MaxMaxWait = MaxRetryAfter

// DefaultMaxWaiters bounds the requests one limiter holds waiting for their
// reservation at once (see WithMaxWaiters).
const DefaultMaxWaiters = 4096

// WithMaxWait lets a request that does not fit its buckets now, but would
// fit them all within d, wait for its turn instead of getting a 429: it is
// admitted with a reservation (its debits are made at once, and the
// buckets may go below zero, as x/time/rate's Reserve), held exactly the
// time the store computed (Decision.Wait, on a real timer: the limiter's
// clock only computes its length), then forwarded. The observer's Decided
// sees it before the wait, Allowed with DecisionEvent.Wait > 0.
//
// Waiters are served in the order the store decided them: a later request
// on the same buckets is told a longer wait and never overtakes an earlier
// one (with the Redis store, across processes too), but for credits: a
// credit landing while reservations wait (a reconcile below its estimate,
// a refund) goes to the bucket, not to the waiters, so a later request may
// then fit at once while an earlier one keeps the wait it was told. A
// request whose wait
// would exceed d is refused as without WithMaxWait, its Retry-After
// counting the reservations ahead of it. A gauge (ConcurrentRequests)
// never waits: a request it refuses gets its 429 at once, and a waiting
// request holds its slots while it waits.
//
// A client that goes away while waiting (the request's context is done)
// gets its reservation credited back in full, requests and tokens
// (ReconcileRequest.Refund), and its slots released; the next handler
// never sees the request, and the limiter answers it a 429 with the time
// it had left to wait, in case something other than the client ended the
// context.
//
// What a waiter holds: its request and net/http's goroutine for it, one
// timer, its debits and its gauge slots. How many wait: at most
// WithMaxWaiters per limiter (past it a request is decided as without
// WithMaxWait), and on each bucket at most the requests its refill admits
// within d (a requests bucket of R per minute holds at most ⌈R×d/1 min⌉
// waiters).
//
// In shadow mode the reservation is debited as enforcement would debit it,
// but the request never waits. A store that makes no reservations
// answers an admission with MaxWait set with an error wrapping
// errors.ErrUnsupported: the limiter then logs it once and decides every
// request as without WithMaxWait. 0, the default, turns reservations off;
// d must be in [0, MaxMaxWait].
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 || d > MaxMaxWait {
			c.fail("WithMaxWait", fmt.Errorf("%v: must be in [0, %v]", d, MaxMaxWait))
		}
		c.maxWait = d
	})
}

// WithMaxWaiters bounds the requests the limiter holds waiting for their
// reservation at once (WithMaxWait); a request arriving past the bound is
// decided as without WithMaxWait (refused when it does not fit now).
// Default: DefaultMaxWaiters. n must be positive.
//
// The bound is one pool for the whole limiter, shared by every key and
// workspace: a few dozen keys with empty buckets and long waits can hold
// every place, and other tenants' requests are then refused at once
// instead of waiting. Each bucket holds at most the waiters its refill
// admits within the wait (see WithMaxWait), so to keep places for
// others, size n above the sum of that over the keys expected to wait at
// once, or keep the wait short.
func WithMaxWaiters(n int) Option {
	return optionFunc(func(c *config) {
		if n <= 0 {
			c.fail("WithMaxWaiters", errors.New("must be positive"))
		}
		c.maxWaiters = n
	})
}

// Waiting returns how many requests are waiting for their reservation now
// (WithMaxWait), counting those being decided with the right to wait.
func (l *Limiter) Waiting() int64 { return l.waiting.Load() }

// takeWaitPlace reserves a place among the waiters for a request about to
// be decided; false when WithMaxWait is off or every place is taken.
func (l *Limiter) takeWaitPlace() bool {
	if l.cfg.maxWait <= 0 || l.storeNoWait.Load() {
		return false
	}
	if l.waiting.Add(1) > int64(l.cfg.maxWaiters) {
		l.waiting.Add(-1)
		return false
	}
	return true
}

// waitTurn holds an admitted request for its reservation's wait. It
// reports false, with the reservation credited back and an answer written,
// when the request's context ended first.
func (l *Limiter) waitTurn(w http.ResponseWriter, r *http.Request, a *admission) bool {
	defer l.waiting.Add(-1)
	t := time.NewTimer(a.d.Wait)
	start := time.Now()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		t.Stop()
	}
	left := a.d.Wait - time.Since(start)
	// Refunded in full: the request never reached the provider. The
	// reconcile also releases the request's gauge slots.
	req := a.reconcileRequest(l.cfg.clock())
	req.InputEstimate, req.Refund = a.input, true
	l.reconcile(context.WithoutCancel(r.Context()), a, &req)
	if ce := l.debug.Check(zap.DebugLevel, "llmrate: left while waiting; reservation refunded"); ce != nil {
		ce.Write(zap.String("key_fp", Fingerprint(a.key)), zap.Duration("wait", a.d.Wait), zap.Duration("left", left))
	}
	secs := min(max(ceilSeconds(left), 1), int64(MaxRetryAfter/time.Second))
	w.Header().Set(HeaderRetryAfter, strconv.FormatInt(secs, 10))
	writeError(w, r, http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded",
		fmt.Sprintf("The request ended while it waited %v for its turn under the rate limit; nothing was charged. Please try again in %ds.%s", a.d.Wait.Round(time.Millisecond), secs, seeDocs(l.cfg.docsURL)))
	return false
}

// noReservations records that the store answered a reservation with an
// error wrapping errors.ErrUnsupported: from then on every request is
// decided as without WithMaxWait. Logged once, at warn.
func (l *Limiter) noReservations(err error) {
	if l.storeNoWait.Swap(true) {
		return
	}
	if ce := l.log.Check(zap.WarnLevel, "llmrate: the store makes no reservations; WithMaxWait is off"); ce != nil {
		ce.Write(zap.Error(err))
	}
}
