// Package deadline makes the contexts that bound a store call: a
// context that keeps a parent's values, not its cancellation, and ends at
// a deadline. context.WithTimeout(context.WithoutCancel(parent), d) gives
// each one a timer, a channel and a cancel func of its own (six
// allocations, 400 bytes, and a timer added to and taken from the
// runtime's heap, per call: 0.5 to 0.75 µs). Here the calls whose
// deadlines fall in the same Grain share one: a deadline is rounded up to
// the next Grain boundary, and every context ending there, while any is
// held, shares one stdlib context, whose timer ends them all at once.
// The shared context counts its holders. The last to let go keeps it,
// idle, for the next call ending at the same boundary (calls one at a
// time, a few a millisecond, then share one too), and retires the
// boundary of the same timeout kept idle before it: its timer stopped,
// its context ended. So one boundary is kept idle per timeout (the
// limiter's store timeout, a store's own shorter one: a call bounded by
// both keeps one of each; eight timeouts kept apart, more share a slot).
// A timer fires for calls still running at their deadline, as with
// context.WithTimeout, and for a boundary kept that no later boundary of
// its timeout retired: while calls come at least once a timeout, none
// (a timer firing every millisecond would wake a busy process as often);
// once when calls stop; once a call, some time after it, when calls come
// further apart than the timeout (where before none fired). A context
// derived from a call's and never cancelled, or a context.AfterFunc of
// it never stopped, lives on until its boundary ends, with the call's
// values: at most the timeout after the call (a store should cancel what
// it derives, as go-redis does). A call sharing a boundary, in flight
// with others or one at a time, makes one allocation, 32 bytes, about
// 0.1 µs; the first call of a boundary makes its context, in one
// allocation more than context.WithTimeout and about the time it takes
// (BenchmarkStoreCallContext, TestBoundAllocs).
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
	idx      int64
	deadline time.Time // boundary idx, its wall reading as of its making
	// kept is where it is kept idle once let go: the slot of the timeout
	// of the call that made it (idleFor, found once, at its making).
	kept   *atomic.Pointer[shared]
	ctx    context.Context
	cancel context.CancelFunc
	// holders counts the contexts holding it (0: kept idle, which a
	// context may take again); -1 once retired (its timer stopped): none
	// may take it then.
	holders atomic.Int64
}

// ring holds the boundaries held (and those kept idle), boundary idx at
// idx % ringSize; a boundary retired empties its place, so a quiet
// process holds one per timeout at most.
var ring [ringSize]atomic.Pointer[shared]

// idleSlots is how many timeouts keep a boundary idle each; a timeout
// beyond them shares a slot (idleFor).
const idleSlots = 8

// idleSlot keeps the boundary of one timeout let go by its last holder.
type idleSlot struct {
	d  atomic.Int64           // the timeout (ns) it is for; 0: none yet
	sh atomic.Pointer[shared] // the boundary kept idle; nil: none
}

// idle holds the boundaries kept idle, one per timeout.
var idle [idleSlots]idleSlot

// idleFor is where a boundary made for timeout d is kept idle: the slot
// of d, claimed by the first of its boundaries let go. Once every slot is
// claimed, a timeout without one shares the slot d hashes to, where the
// boundaries of the timeouts sharing it retire one another as they are
// let go (as every boundary was retired when let go, before one was kept).
func idleFor(d time.Duration) *atomic.Pointer[shared] {
	for i := range idle {
		s := &idle[i]
		v := s.d.Load()
		if v == 0 {
			if s.d.CompareAndSwap(0, int64(d)) {
				return &s.sh
			}
			v = s.d.Load() // claimed meanwhile
		}
		if v == int64(d) {
			return &s.sh
		}
	}
	return &idle[uint64(d)*0x9e3779b97f4a7c15>>61].sh // >>61: one of 8
}

// Context is a store call's context: its parent's values, not its
// cancellation, and a deadline it shares with the other calls ending at
// the same boundary. It ends at its deadline, or once it and every other
// context sharing its boundary were released and another boundary of the
// same timeout (or of one sharing its slot: idleFor) was let go after
// them: unlike context.WithTimeout's, a call's release (made when it
// returns) does not end it, so a store must not count on its context
// ending when its call returns.
//
// Its Value answers the stdlib's own lookup of a context's cancellation
// (what context.Cause and a derived context ask for) with the shared
// context's: a context derived from it, directly or under a
// context.WithValue, is registered with the shared context and ended with
// it, no goroutine waiting for it; Cause says DeadlineExceeded or
// Canceled, never the parent's cause.
type Context struct {
	values   context.Context
	sh       *shared
	released atomic.Bool
}

// key is Value's key for the *Context a context is or wraps (Within).
type key struct{}

func (c *Context) Deadline() (time.Time, bool) { return c.sh.deadline, true }
func (c *Context) Done() <-chan struct{}       { return c.sh.ctx.Done() }
func (c *Context) Err() error                  { return c.sh.ctx.Err() }

func (c *Context) Value(k any) any {
	if k == (key{}) {
		return c
	}
	// The shared context (context.WithDeadline of Background) has no
	// values: it answers only the stdlib's cancellation lookup.
	if v := c.sh.ctx.Value(k); v != nil {
		return v
	}
	return c.values.Value(k)
}

func (c *Context) String() string { return "deadline.Context(" + c.sh.deadline.String() + ")" }

// release is a Context's cancel func: its boundary's holder count drops
// (once, however often it is called); the last holder keeps the boundary
// idle and retires the one kept before (drop).
func (c *Context) release() {
	if c.released.CompareAndSwap(false, true) {
		c.sh.drop()
	}
}

// Bound returns a context with parent's values, not its cancellation,
// that ends d after now (rounded up to Grain), and its Releaser, to be
// released once the call is done, as context.WithTimeout's cancel func
// is called (a Releaser is a value: a func bound to the context would be
// an allocation of its own, per call). now must be time.Now(): the
// deadline is counted from it. A d not above 0 or above about ringSize
// Grains gets context.WithTimeout's, not rounded.
func Bound(parent context.Context, now time.Time, d time.Duration) (context.Context, Releaser) {
	idx := boundaryOf(now, d)
	if d <= 0 || d > (ringSize-2)*Grain || idx <= 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d)
		return ctx, Releaser{cancel: cancel}
	}
	c := hold(idx, now, parent, d)
	return c, Releaser{c: c}
}

// Releaser lets go of a context Bound or Within made.
type Releaser struct {
	c      *Context
	cancel context.CancelFunc // a context of its own (context.WithTimeout's)
}

// Release lets the context go; a second call does nothing, as a second
// call of a cancel func does nothing. The zero Releaser does nothing.
func (r Releaser) Release() {
	if r.c != nil {
		r.c.release()
	} else if r.cancel != nil {
		r.cancel()
	}
}

// Within returns parent when it ends within d after now; otherwise a
// context that ends d after now (rounded up to Grain) or when parent
// ends, whichever is first, and its Releaser. For a parent Bound
// made (or one wrapping it with values only), which ends at its deadline
// or, after its caller let go of it once this call is done, when its
// boundary is retired (never while this call holds it), that is a shared
// context of the same values, or parent itself when that would end at
// parent's boundary or later (a Bound of the same d made a little
// earlier, rounded up to the same Grain); for any other,
// context.WithTimeout's. now must be time.Now().
func Within(parent context.Context, now time.Time, d time.Duration) (context.Context, Releaser) {
	if dl, ok := parent.Deadline(); ok && dl.Sub(now) <= d {
		return parent, Releaser{}
	}
	p, _ := parent.(*Context) // the limiter's, passed as it is: no lookup
	if p == nil {
		if q, ok := parent.Value(key{}).(*Context); ok && parent.Done() == q.Done() {
			p = q
		}
	}
	if p != nil {
		// parent's deadline is more than d away (above), so d is no
		// longer than the time to a boundary in the ring: no overflow.
		if boundaryOf(now, d) >= p.sh.idx {
			return parent, Releaser{}
		}
		return Bound(parent, now, d)
	}
	ctx, cancel := context.WithTimeout(parent, d)
	return ctx, Releaser{cancel: cancel}
}

// boundaryOf is the boundary a context made at now for d ends at: d
// after now, rounded up to Grain.
func boundaryOf(now time.Time, d time.Duration) int64 {
	return (int64(now.Sub(origin)+d) + int64(Grain) - 1) / int64(Grain)
}

// take counts one more holder of sh (kept idle or not), or reports false
// once it is retired.
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

// drop counts one holder fewer. The last keeps sh idle, in its place,
// for the next call ending at its boundary (at one call at a time, that
// call would otherwise make a boundary's context and stop its timer
// again: six allocations and two updates of the runtime's timer heap),
// and retires the boundary of its timeout kept idle before, unless a
// call took that one again since.
func (sh *shared) drop() {
	if sh.holders.Add(-1) != 0 {
		return
	}
	if prev := sh.kept.Swap(sh); prev != nil && prev != sh {
		prev.retire()
	}
}

// retire ends sh when none holds it: its timer stopped, its context
// ended (Canceled), its place emptied; none may take it after.
func (sh *shared) retire() {
	if sh.holders.CompareAndSwap(0, -1) {
		ring[sh.idx%ringSize].CompareAndSwap(sh, nil)
		sh.cancel()
	}
}

// hold returns a Context of parent's values holding the shared context
// of boundary idx once more, making that (and its timer) when none is
// held or kept; now is time.Now(), d the call's timeout.
func hold(idx int64, now time.Time, parent context.Context, d time.Duration) *Context {
	place := &ring[idx%ringSize]
	for {
		old := place.Load()
		if old != nil && old.idx == idx && old.take() {
			return &Context{values: parent, sh: old}
		}
		// The boundary as a time read from now (its monotonic and its
		// wall reading both now's plus the time to the boundary), not
		// origin's: a wall clock stepped since the process started
		// does not skew the wall reading Deadline returns.
		sh := &shared{idx: idx, deadline: now.Add(time.Duration(idx)*Grain - now.Sub(origin)), kept: idleFor(d)}
		sh.holders.Store(1)
		sh.ctx, sh.cancel = context.WithDeadline(context.Background(), sh.deadline)
		if place.CompareAndSwap(old, sh) {
			// The caller's Context is an allocation of its own, not a
			// field of sh: sh lives while any call of its boundary holds
			// it, and the caller's values (its request's context) must
			// not live on with it after the caller let go.
			return &Context{values: parent, sh: sh}
		}
		sh.cancel()
	}
}
