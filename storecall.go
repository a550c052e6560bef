package llmrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmrate/llmrate/internal/deadline"
)

// ContextHonouring is implemented by a Store whose calls return promptly
// once their context is done (redisstore.Store does). When
// HonoursContext reports true, the limiter calls the store directly, on the
// calling goroutine, with the store timeout as the context's deadline.
// Other stores are called on a guarded goroutine of the limiter's own, so
// that a store ignoring its context still cannot hold a request past the
// timeout; at most WithMaxStoreCalls such calls are in flight.
type ContextHonouring interface {
	HonoursContext() bool
}

// DefaultMaxStoreCalls bounds the guarded store calls in flight (see
// WithMaxStoreCalls).
const DefaultMaxStoreCalls = 4096

// ErrStoreBusy is the cause of a StoreError when a guarded store call was
// not started because DefaultMaxStoreCalls (or WithMaxStoreCalls) calls to a
// store that ignores its context were still running.
var ErrStoreBusy = errors.New("llmrate: too many store calls in flight")

// WithMaxStoreCalls bounds the calls in flight to a store that does not
// declare it honours its context (see ContextHonouring). Each such call runs
// on a goroutine of its own, which stays until the store returns, even past
// the store timeout; past the bound the request fails open at once (counted,
// with ErrStoreBusy) instead of parking one more goroutine. Default:
// DefaultMaxStoreCalls. n must be positive.
func WithMaxStoreCalls(n int) Option {
	return optionFunc(func(c *config) {
		if n <= 0 {
			c.fail("WithMaxStoreCalls", errors.New("must be positive"))
		}
		c.maxStoreCalls = n
	})
}

// storeCaller makes every call to a non-memory store: directly with a
// deadline when the store honours its context, else on a guarded goroutine,
// at most cap(slots) at a time.
type storeCaller struct {
	store   Store
	timeout time.Duration
	direct  bool
	slots   chan struct{} // one per guarded call in flight; nil when direct
}

func newStoreCaller(s Store, timeout time.Duration, maxCalls int) *storeCaller {
	c := &storeCaller{store: s, timeout: timeout}
	if h, ok := s.(ContextHonouring); ok && h.HonoursContext() {
		c.direct = true
	} else {
		if maxCalls <= 0 {
			maxCalls = DefaultMaxStoreCalls
		}
		c.slots = make(chan struct{}, maxCalls)
	}
	return c
}

func (c *storeCaller) admit(parent context.Context, req AdmitRequest) (Decision, error) {
	if c.direct {
		// callDirect does not keep its f, so this closure and req stay on
		// the stack; callStore's would move them to the heap on every
		// admission (its guarded path hands f to a goroutine).
		return callDirect(c, parent, func(ctx context.Context) (Decision, error) { return c.store.Admit(ctx, req) })
	}
	return c.admitGuarded(parent, req)
}

// admitGuarded is admit on a guarded goroutine; a function of its own, so
// that the closure's capture of req costs only this path.
func (c *storeCaller) admitGuarded(parent context.Context, req AdmitRequest) (Decision, error) {
	return callStore(c, parent, func(ctx context.Context) (Decision, error) { return c.store.Admit(ctx, req) })
}

func (c *storeCaller) reconcile(parent context.Context, req ReconcileRequest) error {
	_, err := callStore(c, parent, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.store.Reconcile(ctx, req)
	})
	return err
}

// callStore runs one store call bounded by the store timeout. The parent's
// cancellation is not inherited (a client gone mid-response still gets its
// charge reconciled), its values are. A panic inside the store is returned
// as a *PanicError.
func callStore[T any](c *storeCaller, parent context.Context, f func(context.Context) (T, error)) (T, error) {
	if c.direct {
		return callDirect(c, parent, f)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), c.timeout)
	defer cancel()
	select {
	case c.slots <- struct{}{}:
	default:
		var zero T
		return zero, fmt.Errorf("%w (%d)", ErrStoreBusy, cap(c.slots))
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			if p := recover(); p != nil {
				res.err = &PanicError{Where: "store", Value: p}
			}
			<-c.slots
			ch <- res
		}()
		res.v, res.err = f(ctx)
	}()
	select {
	case res := <-ch:
		if res.err != nil && ctx.Err() != nil {
			res.err = fmt.Errorf("%w after %v: %w", ErrStoreTimeout, c.timeout, res.err)
		}
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w after %v", ErrStoreTimeout, c.timeout)
	}
}

// callDirect is callStore for a store that honours its context: f runs on
// this goroutine, bounded by the store timeout (the store has promised to
// return once its context is done), through a context that shares its
// timer with the calls ending in the same millisecond (internal/deadline:
// it ends at its deadline, or once every call ending in that millisecond
// has returned and one ending in another has returned after them, not at
// this call's return). A panic inside it is returned as a *PanicError.
func callDirect[T any](c *storeCaller, parent context.Context, f func(context.Context) (T, error)) (v T, err error) {
	ctx, r := deadline.Bound(parent, time.Now(), c.timeout)
	defer r.Release()
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, &PanicError{Where: "store", Value: p}
		}
	}()
	v, err = f(ctx)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w after %v: %w", ErrStoreTimeout, c.timeout, err)
	}
	return v, err
}
