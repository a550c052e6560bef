// Package deadline makes the contexts that bound a store call: a
// context that keeps a parent's values, not its cancellation, and ends at
// a deadline. context.WithTimeout gives each one a timer, a channel and a
// cancel func of its own (five allocations, a timer added to and taken
// from the runtime's heap, per call: about half a microsecond, more with
// many calls in flight). Here the calls whose deadlines fall in the same
// Grain share one: a deadline is rounded up to the next Grain boundary,
// and every context ending there shares one stdlib context, whose timer
// ends them all at once. A call then costs two small allocations and no
// timer.
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
}

// ring holds the boundaries in use, boundary idx at idx % ringSize; a
// place is emptied when its context ends, so a quiet process holds none.
var ring [ringSize]atomic.Pointer[shared]

// Context is a store call's context: its parent's values (through
// context.WithoutCancel, so Cause and derived contexts see no parent
// cancellation), and a deadline it shares with the other calls ending at
// the same boundary. It ends at its deadline and only then.
type Context struct {
	values   context.Context
	sh       *shared
	deadline time.Time
}

func (c *Context) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *Context) Done() <-chan struct{}       { return c.sh.ctx.Done() }
func (c *Context) Err() error                  { return c.sh.ctx.Err() }
func (c *Context) Value(key any) any           { return c.values.Value(key) }

// AfterFunc arranges to call f once c ends, as context.AfterFunc does;
// with it, a context derived from c (context.WithTimeout, say) is ended
// by c's end without a goroutine waiting for it.
func (c *Context) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(c.sh.ctx, f) }

func (c *Context) String() string { return "deadline.Context(" + c.deadline.String() + ")" }

// nop is the cancel func of a shared context: nothing to release.
func nop() {}

// After returns a context with parent's values, not its cancellation,
// that ends d after now (rounded up to Grain), and its cancel func (which
// only releases a context of its own: one beyond the ring, ended at once).
// now is time.Now().
func After(parent context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	return after(context.WithoutCancel(parent), now, d)
}

// Within returns parent when it ends within d after now; otherwise a
// context that ends d after now (rounded up to Grain) or when parent
// ends, whichever is first, and its cancel func. For a parent After made,
// which ends only at its deadline, that is a shared context of the same
// values; for any other, context.WithTimeout's.
func Within(parent context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := parent.Deadline(); ok && dl.Sub(now) <= d {
		return parent, nop
	}
	if p, ok := parent.(*Context); ok {
		return after(p.values, now, d)
	}
	return context.WithTimeout(parent, d)
}

// after is After with values already free of any cancellation.
func after(values context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	idx := (int64(now.Sub(origin)+d) + int64(Grain) - 1) / int64(Grain)
	if d > (ringSize-2)*Grain || idx <= 0 {
		return context.WithTimeout(values, d)
	}
	sh := boundary(idx)
	return &Context{values: values, sh: sh, deadline: sh.deadline()}, nop
}

// deadline is the time boundary sh ends.
func (sh *shared) deadline() time.Time { return origin.Add(time.Duration(sh.idx) * Grain) }

// boundary returns the shared context of boundary idx, making it (and
// its timer) when it is not in the ring.
func boundary(idx int64) *shared {
	place := &ring[idx%ringSize]
	for {
		old := place.Load()
		if old != nil && old.idx == idx {
			return old
		}
		sh := &shared{idx: idx}
		sh.ctx, sh.cancel = context.WithDeadline(context.Background(), sh.deadline())
		if !place.CompareAndSwap(old, sh) {
			sh.cancel()
			continue
		}
		context.AfterFunc(sh.ctx, func() {
			place.CompareAndSwap(sh, nil)
			sh.cancel()
		})
		return sh
	}
}
