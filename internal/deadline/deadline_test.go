package deadline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type valueKey struct{}

// after is Bound with its Releaser as a cancel func, as the tests hold
// them (in maps and slices of funcs).
func after(parent context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, r := Bound(parent, now, d)
	return ctx, r.Release
}

// waitDone waits for ctx to end, failing t when it has not within limit.
func waitDone(t *testing.T, ctx context.Context, limit time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(limit):
		t.Fatalf("context not done %v after it was made", limit)
	}
}

func TestBoundEndsAtItsRoundedDeadline(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), valueKey{}, "v"))
	defer cancelParent()
	now := time.Now()
	ctx, cancel := after(parent, now, 5*time.Millisecond)
	defer cancel()
	dl, ok := ctx.Deadline()
	if !ok {
		t.Fatal("no deadline")
	}
	if dl.Before(now.Add(5*time.Millisecond)) || dl.After(now.Add(5*time.Millisecond+Grain)) {
		t.Fatalf("deadline %v after now; want within [5ms, 5ms+%v]", dl.Sub(now), Grain)
	}
	if got := ctx.Value(valueKey{}); got != "v" {
		t.Fatalf("Value = %v; want the parent's v", got)
	}
	cancelParent() // the parent's cancellation is not the call's
	if err := ctx.Err(); err != nil {
		t.Fatalf("Err after the parent's cancel = %v; want nil", err)
	}
	waitDone(t, ctx, 5*time.Second)
	if end := time.Now(); end.Before(dl) {
		t.Fatalf("done %v before its deadline", dl.Sub(end))
	}
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err = %v; want DeadlineExceeded", err)
	}
	if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Cause = %v; want DeadlineExceeded (not the parent's cancellation)", err)
	}
}

func TestSameBoundaryShared(t *testing.T) {
	now := time.Now()
	a, cancelA := after(context.Background(), now, 20*time.Millisecond)
	defer cancelA()
	b, cancelB := after(context.Background(), now, 20*time.Millisecond)
	defer cancelB()
	if a.Done() != b.Done() {
		t.Fatal("two contexts ending at the same boundary have their own channels")
	}
	c, cancelC := after(context.Background(), now, 25*time.Millisecond)
	defer cancelC()
	if c.Done() == a.Done() {
		t.Fatal("contexts 5 ms apart share a channel")
	}
}

func TestDerivedContextEndsWithIt(t *testing.T) {
	ctx, cancelCtx := after(context.Background(), time.Now(), 3*time.Millisecond)
	defer cancelCtx()
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	waitDone(t, child, 5*time.Second)
	if err := child.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("child Err = %v; want DeadlineExceeded", err)
	}
	stopped := context.AfterFunc(ctx, func() {})
	if stopped() {
		t.Fatal("AfterFunc registered on an ended context could still be stopped")
	}
}

func TestWithin(t *testing.T) {
	now := time.Now()
	outer, cancelOuter := after(context.Background(), now, time.Second)
	defer cancelOuter()
	inner, r := Within(outer, now, 10*time.Millisecond)
	defer r.Release()
	if _, ok := inner.(*Context); !ok {
		t.Fatalf("Within a shared context made %T; want a shared one", inner)
	}
	dl, _ := inner.Deadline()
	if d := dl.Sub(now); d < 10*time.Millisecond || d > 10*time.Millisecond+Grain {
		t.Fatalf("inner deadline %v after now", d)
	}
	if same, _ := Within(inner, now, time.Second); same != inner {
		t.Fatal("Within a nearer deadline did not return the parent")
	}
	// The limiter's store timeout and the store's own, equal: the store's
	// call, made a little after the limiter's, would round up to the same
	// boundary (or, across a Grain edge, the next): the parent serves.
	limiter, cancelLimiter := after(context.Background(), now, 30*time.Millisecond)
	defer cancelLimiter()
	if same, _ := Within(limiter, now.Add(100*time.Microsecond), 30*time.Millisecond); same != limiter {
		t.Fatal("Within an equal timeout, a moment later, made a second context")
	}
	parent, cancelParent := context.WithCancel(context.Background())
	own, rOwn := Within(parent, now, time.Second)
	defer rOwn.Release()
	cancelParent()
	waitDone(t, own, 5*time.Second)
	if !errors.Is(own.Err(), context.Canceled) {
		t.Fatalf("Within a cancellable parent: Err = %v; want its cancellation", own.Err())
	}
}

// A context derived from a shared one, directly, under a
// context.WithValue or inside a struct that embeds it (redisstore's
// attempt context), is ended with it by the stdlib, no goroutine
// waiting for it: go-redis derives one per dial, a store wrapper adding a
// value one per call.
func TestDerivedStartsNoGoroutine(t *testing.T) {
	resetIdle()
	ctx, cancel := after(context.Background(), time.Now(), time.Second)
	defer cancel()
	type embedded struct{ context.Context }
	parents := map[string]context.Context{
		"direct":    ctx,
		"WithValue": context.WithValue(ctx, valueKey{}, "w"),
		"embedded":  embedded{ctx},
	}
	for name, p := range parents {
		before := runtime.NumGoroutine()
		var cancels []context.CancelFunc
		for range 200 {
			_, c := context.WithTimeout(p, time.Hour)
			cancels = append(cancels, c)
		}
		if grew := runtime.NumGoroutine() - before; grew > 20 {
			t.Errorf("%s: 200 derived contexts started %d goroutines", name, grew)
		}
		for _, c := range cancels {
			c()
		}
	}
	// And they end with it: the shared context ends once its last holder
	// let go and another boundary was let go after it (retireIdle), and
	// every context derived from it with it.
	local, cancelLocal := after(context.Background(), time.Now(), 400*time.Millisecond)
	derived, cancelDerived := context.WithCancel(context.WithValue(local, valueKey{}, "w"))
	defer cancelDerived()
	cancelLocal()
	retireIdle(time.Now(), 400*time.Millisecond)
	if local.Err() == nil {
		t.Fatal("the shared context did not end once let go and retired")
	}
	waitDone(t, derived, 5*time.Second)
	if err := context.Cause(derived); !errors.Is(err, context.Canceled) {
		t.Fatalf("derived Cause = %v; want Canceled", err)
	}
}

// Within's own timeout is exact against a parent that is not a shared
// context: a parent ending a moment after d does not serve (the store's
// call would run past its own timeout), and a timeout too long to round
// (math.MaxInt64: "no timeout of the store's own") keeps the parent's
// deadline, as it did before there was rounding.
func TestWithinExactAndHuge(t *testing.T) {
	now := time.Now()
	for _, d := range []time.Duration{200 * time.Microsecond, 30 * time.Millisecond} {
		parent, cancel := context.WithDeadline(context.Background(), now.Add(d+500*time.Microsecond))
		got, rGot := Within(parent, now, d)
		if got == parent {
			t.Errorf("Within(%v) served a plain parent ending %v later", d, 500*time.Microsecond)
		}
		if dl, _ := got.Deadline(); dl.Sub(now) >= d+500*time.Microsecond {
			t.Errorf("Within(%v): deadline %v after now; want d (and the moment since now)", d, dl.Sub(now))
		}
		rGot.Release()
		cancel()
	}
	limiter, cancelLimiter := after(context.Background(), now, 50*time.Millisecond)
	defer cancelLimiter()
	plain, cancelPlain := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelPlain()
	for name, parent := range map[string]context.Context{"shared": limiter, "plain": plain} {
		got, r := Within(parent, now, time.Duration(math.MaxInt64))
		if dl, _ := got.Deadline(); dl.Sub(now) > time.Second {
			t.Errorf("%s parent, Within(MaxInt64): deadline %v after now; want the parent's 50 ms", name, dl.Sub(now))
		}
		r.Release()
	}
}

func TestWithinAWrappedParent(t *testing.T) {
	now := time.Now()
	outer, cancelOuter := after(context.Background(), now, time.Second)
	defer cancelOuter()
	wrapped := context.WithValue(outer, valueKey{}, "w")
	inner, r := Within(wrapped, now, 10*time.Millisecond)
	defer r.Release()
	if _, ok := inner.(*Context); !ok {
		t.Fatalf("Within a value-wrapped shared context made %T; want a shared one", inner)
	}
	if got := inner.Value(valueKey{}); got != "w" {
		t.Fatalf("Value = %v; want the wrapper's w", got)
	}
	// A wrapper that adds a cancellation of its own is no shared context:
	// Within follows its cancellation with context.WithTimeout's.
	cancellable, cancelIt := context.WithCancel(outer)
	own, rOwn := Within(cancellable, now, 10*time.Millisecond)
	defer rOwn.Release()
	if _, ok := own.(*Context); ok {
		t.Fatal("Within a cancellable wrapper made a shared context, deaf to its cancel")
	}
	cancelIt()
	waitDone(t, own, 5*time.Second)
}

func TestNonPositiveTimeoutEndsAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		ctx, cancel := after(context.Background(), time.Now(), d)
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("Bound(%v).Err() = %v; want DeadlineExceeded at once", d, ctx.Err())
		}
		cancel()
	}
}

// Deadline's wall reading is the caller's wall clock plus the time to the
// boundary, as context.WithTimeout's would be (not the process start's
// wall clock plus the monotonic time since).
func TestDeadlineWallReading(t *testing.T) {
	now := time.Now()
	ctx, cancel := after(context.Background(), now, 30*time.Millisecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	wall := dl.Round(0).Sub(now.Round(0))
	if wall < 30*time.Millisecond || wall > 30*time.Millisecond+Grain {
		t.Fatalf("deadline's wall reading %v after now's; want within [30ms, 30ms+%v]", wall, Grain)
	}
}

func TestBeyondTheRing(t *testing.T) {
	now := time.Now()
	ctx, cancel := after(context.Background(), now, time.Hour)
	if _, ok := ctx.(*Context); ok {
		t.Fatal("an hour's deadline shared a boundary")
	}
	if dl, _ := ctx.Deadline(); dl.Sub(now) < time.Hour {
		t.Fatalf("deadline %v; want an hour", dl.Sub(now))
	}
	cancel()
	if ctx.Err() == nil {
		t.Fatal("cancel did not release a context of its own")
	}
}

// retireIdle lets go of a boundary of timeout d two seconds after now's
// (where no test's other boundary of d is), which retires the boundary of
// d kept idle before.
func retireIdle(now time.Time, d time.Duration) {
	_, r := Bound(context.Background(), now.Add(2*time.Second), d)
	r.Release()
}

// resetIdle retires every boundary kept idle and frees every slot, as
// in a process that has let go of none: a test of the slots starts there
// (the tests before it claimed slots for their own timeouts).
func resetIdle() {
	for i := range idle {
		if sh := idle[i].sh.Swap(nil); sh != nil {
			sh.retire()
		}
		idle[i].d.Store(0)
	}
}

// A boundary whose holders all let go is kept, idle, in its place: a
// later call ending there takes it again (no context of its own to
// make); once another boundary of its timeout is let go, it is retired:
// its context ended (Canceled: its timer stopped), its place emptied, and
// a call ending there then makes a new one. A boundary of another timeout
// let go in between retires nothing of it.
func TestBoundaryKeptIdleThenRetired(t *testing.T) {
	resetIdle()
	now := time.Now()
	a, cancelA := after(context.Background(), now, 600*time.Millisecond)
	b, cancelB := after(context.Background(), now, 600*time.Millisecond)
	sh := a.(*Context).sh
	place := &ring[sh.idx%ringSize]
	cancelA()
	cancelA() // a second cancel is no second release
	if place.Load() != sh {
		t.Fatal("the boundary left the ring while b still holds it")
	}
	if b.Err() != nil || a.Err() != nil {
		t.Fatalf("ended while b holds the boundary: a %v, b %v", a.Err(), b.Err())
	}
	cancelB()
	if place.Load() != sh || b.Err() != nil {
		t.Fatalf("the boundary let go by its last holder is not kept: in its place %v, b.Err() %v", place.Load() == sh, b.Err())
	}
	c, cancelC := after(context.Background(), now, 600*time.Millisecond)
	if c.(*Context).sh != sh || c.Done() != b.Done() {
		t.Fatal("a call ending at the boundary kept idle did not take it")
	}
	cancelC()
	retireIdle(now, 700*time.Millisecond) // another timeout
	if place.Load() != sh || c.Err() != nil {
		t.Fatal("a boundary of another timeout let go retired the one kept")
	}
	retireIdle(now, 600*time.Millisecond)
	if place.Load() == sh {
		t.Fatal("the boundary still holds its place once another was let go after it")
	}
	if !errors.Is(b.Err(), context.Canceled) || !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("b.Err() = %v, c.Err() = %v once retired; want Canceled (its timer stopped)", b.Err(), c.Err())
	}
	d, cancelD := after(context.Background(), now, 600*time.Millisecond)
	defer cancelD()
	if d.Err() != nil || d.(*Context).sh == sh {
		t.Fatal("a context made after the boundary was retired took the ended one")
	}
}

// Of boundaries of one timeout let go one after another, only the last
// is kept: every one before it is retired (its timer stopped, its place
// emptied), so a quiet process keeps one timer at most per timeout, which
// ends the last at its deadline.
func TestOneBoundaryKeptIdle(t *testing.T) {
	resetIdle()
	now := time.Now()
	var ctxs []context.Context
	for i := range 5 {
		ctx, cancel := after(context.Background(), now.Add(time.Duration(10*i)*time.Millisecond), 400*time.Millisecond)
		cancel()
		ctxs = append(ctxs, ctx)
	}
	for i, ctx := range ctxs {
		sh := ctx.(*Context).sh
		kept := ring[sh.idx%ringSize].Load() == sh
		if last := i == len(ctxs)-1; last != (ctx.Err() == nil) || last != kept {
			t.Errorf("boundary %d of %d let go: Err() = %v, in its place %v; want only the last kept", i+1, len(ctxs), ctx.Err(), kept)
		}
	}
	last := ctxs[len(ctxs)-1]
	waitDone(t, last, 5*time.Second) // at its deadline, by its own timer
	if !errors.Is(last.Err(), context.DeadlineExceeded) {
		t.Fatalf("the boundary kept ended with %v; want DeadlineExceeded", last.Err())
	}
}

// Bound's Releaser, like a cancel func: it releases once,
// however often it is called, a context of its own (beyond the ring)
// included; the zero Releaser does nothing.
func TestReleaser(t *testing.T) {
	resetIdle()
	now := time.Now()
	a, ra := Bound(context.Background(), now, 700*time.Millisecond)
	b, rb := Bound(context.Background(), now, 700*time.Millisecond)
	if a.Done() != b.Done() {
		t.Fatal("two Bound contexts ending at the same boundary have their own channels")
	}
	ra.Release()
	ra.Release() // a second release is no second drop
	if a.Err() != nil {
		t.Fatalf("ended while b holds the boundary: %v", a.Err())
	}
	rb.Release()
	retireIdle(now, 700*time.Millisecond)
	if !errors.Is(b.Err(), context.Canceled) {
		t.Fatalf("b.Err() = %v once both released and retired; want Canceled", b.Err())
	}
	own, r := Bound(context.Background(), now, time.Hour)
	r.Release()
	if own.Err() == nil {
		t.Fatal("Release did not end a context of its own")
	}
	Releaser{}.Release()
}

// What a store call's context allocates: the first call of a boundary
// (making its context) one more than context.WithTimeout(WithoutCancel(…))
// (its Context, apart from the boundary: TestReleasedValuesNotKept); a
// call sharing a boundary, with calls in flight or one at a time (taking
// the boundary kept idle), one, its Context.
func TestBoundAllocs(t *testing.T) {
	resetIdle()
	if raceEnabled {
		t.Skip("the race detector allocates on its own: counted without it (.ci/run, allocation guards)")
	}
	parent := context.WithValue(context.Background(), valueKey{}, "v")
	withTimeout := testing.AllocsPerRun(200, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), time.Second)
		_ = ctx.Done()
		cancel()
	})
	// Each call the first of its boundary (each 2 Grains after the last).
	// call is one store call: its context made, its Done read, released.
	call := func(now time.Time, d time.Duration) {
		ctx, r := Bound(parent, now, d)
		_ = ctx.Done()
		r.Release()
	}
	base, i := time.Now(), 0
	first := testing.AllocsPerRun(200, func() {
		i++
		call(base.Add(time.Duration(2*i)*Grain), time.Second)
	})
	if first > withTimeout+1 {
		t.Errorf("the first call of a boundary: %v allocations; context.WithTimeout's %v", first, withTimeout)
	}
	// Calls one at a time ending at the same boundary: each takes the
	// boundary the last let go (kept idle), making only its Context.
	at := time.Now()
	oneAtATime := testing.AllocsPerRun(200, func() { call(at, 1500*time.Millisecond) })
	if oneAtATime > 1 {
		t.Errorf("calls one at a time at one boundary: %v allocations each; want 1", oneAtATime)
	}
	// Bounded twice, one at a time, as at the default timeouts (the
	// limiter's 50 ms, redisstore's own 30 ms within it; ten times longer
	// here): each timeout's boundary kept (TestTwoTimeoutsKeptApart), two
	// Contexts a call.
	twice := testing.AllocsPerRun(200, func() {
		outer, ro := Bound(parent, at, 500*time.Millisecond)
		inner, ri := Within(outer, at, 300*time.Millisecond)
		_ = inner.Done()
		ri.Release()
		ro.Release()
	})
	if twice > 2 {
		t.Errorf("calls bounded twice, one at a time: %v allocations each; want 2", twice)
	}
	// Every call made at the same now, so at the boundary hold keeps.
	now := time.Now()
	_, hold := Bound(parent, now, 2*time.Second)
	defer hold.Release()
	shared := testing.AllocsPerRun(200, func() { call(now, 2*time.Second) })
	if shared > 1 {
		t.Errorf("a call sharing a boundary: %v allocations; want 1", shared)
	}
}

// A call's values (its request's context) are not kept once it let go,
// though another call still holds its boundary, which the first made.
func TestReleasedValuesNotKept(t *testing.T) {
	now := time.Now()
	freed := make(chan struct{})
	var b context.Context
	var rb Releaser
	func() {
		big := new([1 << 20]byte)
		runtime.AddCleanup(big, func(struct{}) { close(freed) }, struct{}{})
		parent := context.WithValue(context.Background(), valueKey{}, big)
		a, ra := Bound(parent, now, time.Second) // makes the boundary
		b, rb = Bound(context.Background(), now, time.Second)
		if a.Done() != b.Done() {
			t.Fatal("the two calls do not share a boundary")
		}
		ra.Release()
	}()
	defer rb.Release()
	if b.Err() != nil {
		t.Fatal("the second call's boundary ended")
	}
	for i := 0; ; i++ {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if i == 100 {
			t.Fatal("the first call's values still reachable while the second holds the boundary")
		}
	}
}

func TestConcurrentCallers(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				now := time.Now()
				ctx, cancel := after(context.Background(), now, time.Duration(i%7)*time.Millisecond+time.Millisecond)
				if dl, _ := ctx.Deadline(); dl.Before(now) {
					t.Errorf("deadline before now")
				}
				if i%500 == 0 {
					<-ctx.Done()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
}

// A call bounded by the limiter's store timeout and, within it, by a
// store's own shorter one (by default 50 ms and 30 ms: llmrate's
// DefaultStoreTimeout and redisstore's DefaultTimeout; ten times longer
// here, so that a stalled test machine does not end them), one at a
// time: each timeout keeps its own boundary, so each call takes both
// again, making only its two Contexts, and neither retires the other.
func TestTwoTimeoutsKeptApart(t *testing.T) {
	resetIdle()
	now := time.Now()
	call := func() (outer, inner *Context) {
		o, ro := Bound(context.Background(), now, 500*time.Millisecond)
		i, ri := Within(o, now, 300*time.Millisecond)
		outer, inner = o.(*Context), i.(*Context)
		ri.Release()
		ro.Release()
		return outer, inner
	}
	o1, i1 := call()
	if o1.sh == i1.sh {
		t.Fatal("the store's shorter timeout served by the limiter's boundary")
	}
	o2, i2 := call()
	if o2.sh != o1.sh || i2.sh != i1.sh {
		t.Fatal("a call one at a time did not take both boundaries kept")
	}
	if o1.Err() != nil || i1.Err() != nil {
		t.Fatalf("a boundary kept was ended: %v, %v", o1.Err(), i1.Err())
	}
}

// More timeouts than slots: each timeout beyond them shares a slot with
// another, and their boundaries retire one another as they are let go;
// nothing is kept beyond one boundary a slot, and every call still ends
// at its own deadline.
func TestMoreTimeoutsThanSlots(t *testing.T) {
	resetIdle()
	now := time.Now()
	var kept []context.Context
	for i := range 3 * idleSlots {
		ctx, cancel := after(context.Background(), now, time.Duration(100+i)*time.Millisecond)
		if dl, _ := ctx.Deadline(); dl.Sub(now) < time.Duration(100+i)*time.Millisecond {
			t.Fatalf("timeout %d: deadline %v after now", i, dl.Sub(now))
		}
		cancel()
		kept = append(kept, ctx)
	}
	alive := 0
	for _, ctx := range kept {
		if ctx.Err() == nil {
			alive++
		}
	}
	if alive > idleSlots {
		t.Fatalf("%d boundaries kept idle; want at most one a slot, %d", alive, idleSlots)
	}
	resetIdle()
}

// slotOf reports the slot sh is kept in, or -1 (no side effect, unlike idleFor).
func slotOf(sh *shared) int {
	for i := range idle {
		if idle[i].sh.Load() == sh {
			return i
		}
	}
	return -1
}

// heldNeverEnded runs goroutines × calls store calls at once, each bound
// by one of timeouts and, within it, by half of it (as the limiter's and a
// store's own), each context checked while held: none may be Canceled
// (retired while held) nor end before its deadline. Once every call has
// returned, no boundary is counted held, none idle is out of every slot
// with its timer pending (kept by no one, retired by no one), and no more
// than a boundary a slot is kept.
func heldNeverEnded(t *testing.T, timeouts []time.Duration, goroutines, calls int) {
	resetIdle()
	defer resetIdle()
	var seen sync.Map
	var canceledHeld, earlyHeld atomic.Int64
	check := func(ctx context.Context) {
		if err := ctx.Err(); err != nil {
			dl, _ := ctx.Deadline()
			if errors.Is(err, context.Canceled) {
				canceledHeld.Add(1)
			} else if time.Now().Before(dl) {
				earlyHeld.Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < calls; i++ {
				d := timeouts[rng.IntN(len(timeouts))]
				now := time.Now()
				ctx, r := Bound(context.Background(), now, d)
				if c, ok := ctx.(*Context); ok {
					seen.Store(c.sh, struct{}{})
				}
				check(ctx)
				inner, ri := Within(ctx, now, d/2)
				if c, ok := inner.(*Context); ok {
					seen.Store(c.sh, struct{}{})
				}
				if rng.IntN(64) == 0 {
					runtime.Gosched()
				}
				check(inner)
				check(ctx)
				ri.Release()
				r.Release()
			}
		}(g)
	}
	wg.Wait()
	if n := canceledHeld.Load(); n > 0 {
		t.Errorf("%d held contexts found Canceled (retired while held)", n)
	}
	if n := earlyHeld.Load(); n > 0 {
		t.Errorf("%d held contexts ended before their deadline", n)
	}
	kept, strays, held := 0, 0, 0
	seen.Range(func(k, _ any) bool {
		sh := k.(*shared)
		switch h := sh.holders.Load(); {
		case h < 0:
		case h == 0:
			if slotOf(sh) >= 0 {
				kept++
			} else if sh.ctx.Err() == nil {
				strays++ // idle, in no slot, not retired, its timer still pending
			}
		default:
			held++
		}
		return true
	})
	if held > 0 {
		t.Errorf("%d boundaries still counted as held after every release", held)
	}
	if strays > 0 {
		t.Errorf("%d idle boundaries neither retired nor kept in a slot, timers pending", strays)
	}
	if kept > idleSlots {
		t.Errorf("%d boundaries kept", kept)
	}
}

// Holders and the boundaries kept idle, many calls at once: see
// heldNeverEnded (a take that revived a retired boundary, or a retire
// that ended a held one, fails it).
func TestHeldNeverEndedFewTimeouts(t *testing.T) {
	heldNeverEnded(t, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 50 * time.Millisecond}, 8, 20000)
}

// The same with more timeouts than slots: timeouts sharing a slot retire
// one another's boundaries, never a held one.
func TestHeldNeverEndedMoreTimeoutsThanSlots(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 13; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond+time.Duration(i)*37*time.Microsecond)
	}
	heldNeverEnded(t, ds, 8, 20000)
}

// Concurrent first claims of the slots: one slot per timeout, the same
// slot for every caller of that timeout, no timeout claimed twice.
func TestSlotClaimsConcurrent(t *testing.T) {
	defer resetIdle()
	for iter := 0; iter < 300; iter++ {
		resetIdle()
		ds := make([]time.Duration, 12)
		for i := range ds {
			ds[i] = time.Duration(1000+i*7+iter) * time.Microsecond
		}
		got := make([][4]*atomic.Pointer[shared], len(ds))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range ds {
			for j := 0; j < 4; j++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					got[i][j] = idleFor(ds[i])
				}()
			}
		}
		close(start)
		wg.Wait()
		claimed := map[int64]int{}
		for s := range idle {
			claimed[idle[s].d.Load()]++
		}
		for v, n := range claimed {
			if n > 1 {
				t.Fatalf("iter %d: timeout %v claimed %d slots", iter, time.Duration(v), n)
			}
		}
		if len(claimed) != idleSlots || claimed[0] != 0 {
			t.Fatalf("iter %d: claims %v", iter, claimed)
		}
		for i := range ds {
			for j := 1; j < 4; j++ {
				if got[i][j] != got[i][0] {
					t.Fatalf("iter %d: timeout %v given two slots", iter, ds[i])
				}
			}
			if p := idleFor(ds[i]); p != got[i][0] {
				t.Fatalf("iter %d: timeout %v later given another slot", iter, ds[i])
			}
		}
	}
}

// BenchmarkStoreCallContext: a store call's context made, its Done and
// Deadline read (as go-redis does), and released, from every P at once:
// one at a time (each released before the next is made: each takes the
// boundary the last let go, kept idle, so one is made a Grain), or with
// 32 calls in flight per P (each released 32 calls later): Bound, what
// the limiter makes, against context.WithTimeout(context.WithoutCancel(
// parent)), what it made before.
//
//	go test -run '^$' -bench StoreCallContext -benchmem -cpu 1,2 ./internal/deadline
func BenchmarkStoreCallContext(b *testing.B) {
	parent := context.WithValue(context.Background(), valueKey{}, "v")
	withTimeout := func(_ context.Context, _ time.Time, d time.Duration) (context.Context, Releaser) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d)
		return ctx, Releaser{cancel: cancel}
	}
	for _, inFlight := range []int{0, 32} {
		for _, c := range []struct {
			name string
			make func(context.Context, time.Time, time.Duration) (context.Context, Releaser)
		}{{"WithTimeout", withTimeout}, {"Bound", Bound}} {
			b.Run(fmt.Sprintf("%s/in-flight=%d", c.name, inFlight), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					held := make([]Releaser, inFlight)
					for i := 0; pb.Next(); i++ {
						ctx, r := c.make(parent, time.Now(), 50*time.Millisecond)
						_ = ctx.Done()
						_, _ = ctx.Deadline()
						if inFlight == 0 {
							r.Release()
							continue
						}
						held[i%inFlight].Release() // the zero Releaser does nothing
						held[i%inFlight] = r
					}
					for _, r := range held {
						r.Release()
					}
				})
			})
		}
	}
}

// BenchmarkStoreCallContextTwice: a store call at the default timeouts,
// one at a time: the limiter's context (50 ms) and, within it, the
// store's own shorter one (30 ms), each made, its Done and Deadline read,
// and released: Bound and Within, against context.WithTimeout twice, what
// the limiter and redisstore made before.
//
//	go test -run '^$' -bench StoreCallContextTwice -benchmem -cpu 1 ./internal/deadline
func BenchmarkStoreCallContextTwice(b *testing.B) {
	parent := context.WithValue(context.Background(), valueKey{}, "v")
	b.Run("WithTimeout", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			outer, cancelOuter := context.WithTimeout(context.WithoutCancel(parent), 50*time.Millisecond)
			inner, cancelInner := context.WithTimeout(outer, 30*time.Millisecond)
			_ = inner.Done()
			_, _ = inner.Deadline()
			cancelInner()
			cancelOuter()
		}
	})
	b.Run("Bound", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			outer, ro := Bound(parent, now, 50*time.Millisecond)
			inner, ri := Within(outer, now, 30*time.Millisecond)
			_ = inner.Done()
			_, _ = inner.Deadline()
			ri.Release()
			ro.Release()
		}
	})
}
