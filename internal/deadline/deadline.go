// Package deadline makes the contexts that bound a store call: a
// context that keeps a parent's values, not its cancellation, and ends at
// a deadline. context.WithTimeout gives each one a timer, a channel and a
// cancel func of its own (five allocations, a timer added to and taken
// from the runtime's heap, per call: about half a microsecond, more with
// many calls in flight). Here the calls whose deadlines fall in the same
// Grain share one: a deadline is rounded up to the next Grain boundary,
// and every context ending there, while any is held, shares one stdlib
// context, whose timer ends them all at once. The shared context counts
// its holders: the last to let go (its cancel func) stops the timer, so a
// timer fires only for calls still running at their deadline, as with
// context.WithTimeout (a timer firing every millisecond would wake an
// idle process as often).
package deadline

import (
	"context"
	"sync/atomic"
	"time"
)

// Grain is the step deadlines are rounded up to: a context made for d
// ends between d and d + Grain from its making.
const Grain = time.Millisecond

// ringSize is how many Grain boundaries are shared at once: a deadline
// further than about ringSize Grains ahead gets a context of its own
// (context.WithDeadline), as does any whose place is taken.
const ringSize = 4096

// origin is the time the boundaries count from (time.Now's monotonic
// reading: a wall clock stepped does not move them).
var origin = time.Now()

// shared is the context every call ending at boundary idx shares.
type shared struct {
	idx    int64
	ctx    context.Context
	cancel context.CancelFunc
	// holders counts the contexts holding it; -1 once the last let go
	// (its timer stopped): none may take it then.
	holders atomic.Int64
}

// ring holds the boundaries held, boundary idx at idx % ringSize; the
// last holder to let go empties its place, so a quiet process holds none.
var ring [ringSize]atomic.Pointer[shared]

// Context is a store call's context: its parent's values (through
// context.WithoutCancel, so Cause and derived contexts see no parent
// cancellation), and a deadline it shares with the other calls ending at
// the same boundary. It ends at its deadline, or once it and every other
// context sharing its boundary were cancelled (as context.WithTimeout's
// ends at its cancel, which a call makes when it returns).
type Context struct {
	values   context.Context
	sh       *shared
	released atomic.Bool
}

func (c *Context) Deadline() (time.Time, bool) { return c.sh.deadline(), true }
func (c *Context) Done() <-chan struct{}       { return c.sh.ctx.Done() }
func (c *Context) Err() error                  { return c.sh.ctx.Err() }
func (c *Context) Value(key any) any           { return c.values.Value(key) }

// AfterFunc arranges to call f once c ends, as context.AfterFunc does;
// with it, a context derived from c (context.WithTimeout, say) is ended
// by c's end without a goroutine waiting for it.
func (c *Context) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(c.sh.ctx, f) }

func (c *Context) String() string { return "deadline.Context(" + c.sh.deadline().String() + ")" }

// nop is the cancel func of a context Within returned as it was.
func nop() {}

// release is a Context's cancel func: its boundary's holder count drops
// (once, however often it is called), and the last holder stops the
// boundary's timer and empties its place in the ring.
func (c *Context) release() {
	if c.released.CompareAndSwap(false, true) {
		c.sh.drop()
	}
}

// After returns a context with parent's values, not its cancellation,
// that ends d after now (rounded up to Grain), and its cancel func, to be
// called once the call is done, as context.WithTimeout's. now is
// time.Now().
func After(parent context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	return after(context.WithoutCancel(parent), now, d)
}

// Within returns parent when it ends within d after now; otherwise a
// context that ends d after now (rounded up to Grain) or when parent
// ends, whichever is first, and its cancel func. For a parent After made,
// which ends at its deadline or at its cancel (made by its caller after
// this call is done), that is a shared context of the same values; for
// any other, context.WithTimeout's.
func Within(parent context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := parent.Deadline(); ok && dl.Sub(now) <= d {
		return parent, nop
	}
	if p, ok := parent.(*Context); ok {
		if boundaryOf(now, d) >= p.sh.idx {
			// A context of its own would end at the parent's boundary
			// or after it: parent ends first (an After of the same d
			// made a little earlier, rounded up to the same Grain).
			return parent, nop
		}
		return after(p.values, now, d)
	}
	return context.WithTimeout(parent, d)
}

// boundaryOf is the boundary a context made at now for d ends at: d
// after now, rounded up to Grain.
func boundaryOf(now time.Time, d time.Duration) int64 {
	return (int64(now.Sub(origin)+d) + int64(Grain) - 1) / int64(Grain)
}

// after is After with values already free of any cancellation.
func after(values context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	idx := boundaryOf(now, d)
	if d > (ringSize-2)*Grain || idx <= 0 {
		return context.WithTimeout(values, d)
	}
	sh := hold(idx)
	c := &Context{values: values, sh: sh}
	return c, c.release
}

// deadline is the time boundary sh ends.
func (sh *shared) deadline() time.Time { return origin.Add(time.Duration(sh.idx) * Grain) }

// take counts one more holder of sh, or reports false when its last
// holder has let go.
func (sh *shared) take() bool {
	for {
		n := sh.holders.Load()
		if n < 0 {
			return false
		}
		if sh.holders.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// drop counts one holder fewer; the last stops its timer (ending its
// context, which none holds) and empties its place.
func (sh *shared) drop() {
	if sh.holders.Add(-1) == 0 && sh.holders.CompareAndSwap(0, -1) {
		ring[sh.idx%ringSize].CompareAndSwap(sh, nil)
		sh.cancel()
	}
}

// hold returns the shared context of boundary idx, held once more,
// making it (and its timer) when none is held.
func hold(idx int64) *shared {
	place := &ring[idx%ringSize]
	for {
		old := place.Load()
		if old != nil && old.idx == idx && old.take() {
			return old
		}
		sh := &shared{idx: idx}
		sh.holders.Store(1)
		sh.ctx, sh.cancel = context.WithDeadline(context.Background(), sh.deadline())
		if place.CompareAndSwap(old, sh) {
			return sh
		}
		sh.cancel()
	}
}
