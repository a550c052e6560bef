package memstore

import (
	"math/bits"
	"time"
)

// Minute is the refill period in nanoseconds: a bucket gains its per-minute
// figure over exactly this many nanoseconds.
const Minute = uint64(time.Minute)

// Bucket is one token bucket in exact integer arithmetic.
//
// The level is whole units (requests or tokens); frac holds the refill that
// has accrued but not yet made a whole unit, in 1/minute units, so that
// level + frac/minute is the exact real level and nothing drifts however the
// elapsed time is sliced. The level may be negative (debt after a reconcile
// debited an under-estimate forward); it never exceeds capacity.
//
// Capacity is 2× rate (the burst), rate is the per-minute figure. A bucket
// does not store its figures: the caller passes the tier's figures on every
// call, so a tier change keeps the level and clamps it to the new capacity.
type Bucket struct {
	Level int64
	Frac  int64 // 0 <= Frac < Minute
}

// Refill adds the refill of dt nanoseconds at rate units per minute, capped at
// capacity. A full bucket keeps no fraction. dt <= 0 refills nothing.
// Exact for rate up to MaxPerMinute and any dt: the products are 128-bit.
func (b *Bucket) Refill(rate, capacity, dt int64) {
	if b.Level >= capacity {
		b.Level, b.Frac = capacity, 0
		return
	}
	if dt <= 0 {
		return
	}
	// accrued = rate*dt + frac, in 1/minute units.
	hi, lo := bits.Mul64(uint64(rate), uint64(dt))
	var c uint64
	lo, c = bits.Add64(lo, uint64(b.Frac), 0)
	hi += c
	// needed = (capacity - level) * Minute. capacity - level > 0 and is at
	// most 3*capacity (debt is floored at -2*capacity), so it fits.
	nhi, nlo := bits.Mul64(uint64(capacity-b.Level), Minute)
	if hi > nhi || (hi == nhi && lo >= nlo) {
		b.Level, b.Frac = capacity, 0
		return
	}
	// accrued < needed < 2^64*Minute, so the quotient fits in 64 bits.
	// Usually accrued fits in 64 bits itself: dividing by the constant
	// minute then compiles to a multiplication.
	var q, r uint64
	if hi == 0 {
		q, r = lo/Minute, lo%Minute
	} else {
		q, r = bits.Div64(hi, lo, Minute)
	}
	b.Level += int64(q)
	b.Frac = int64(r)
}

// Wait returns the exact time until the bucket holds n units at rate units per
// Minute, 0 if it already does. never is true when n exceeds capacity: the
// request cannot fit however long it waits. A wait longer than limit is
// reported as limit (callers clamp anyway, and this keeps it overflow-free).
// It is PWait with a period of a Minute.
func (b *Bucket) Wait(n, rate, capacity int64, limit time.Duration) (d time.Duration, never bool) {
	return b.PWait(n, rate, capacity, limit, Minute)
}

// Prefill is bucket.refill with a period of period nanoseconds: it adds
// rate×dt/period, capped at capacity. Exact for any figure up to
// MaxPerMinute, period up to MaxWindow and any dt (128-bit products).
func (b *Bucket) Prefill(rate, capacity, dt int64, period uint64) {
	if b.Level >= capacity {
		b.Level, b.Frac = capacity, 0
		return
	}
	if dt <= 0 {
		return
	}
	hi, lo := bits.Mul64(uint64(rate), uint64(dt))
	var c uint64
	lo, c = bits.Add64(lo, uint64(b.Frac), 0)
	hi += c
	nhi, nlo := bits.Mul64(uint64(capacity-b.Level), period)
	if hi > nhi || (hi == nhi && lo >= nlo) {
		b.Level, b.Frac = capacity, 0
		return
	}
	q, r := bits.Div64(hi, lo, period)
	b.Level += int64(q)
	b.Frac = int64(r)
}

// PWait returns the exact time until the bucket holds n units at rate units
// per period nanoseconds (the per-minute buckets' period is a Minute, a
// window's its Per), 0 if it already does; limit when longer; never when
// n exceeds capacity.
func (b *Bucket) PWait(n, rate, capacity int64, limit time.Duration, period uint64) (d time.Duration, never bool) {
	if n > capacity {
		return limit, true
	}
	if b.Level >= n {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(n-b.Level), period)
	var br uint64
	lo, br = bits.Sub64(lo, uint64(b.Frac), 0)
	hi -= br
	lhi, llo := bits.Mul64(uint64(rate), uint64(limit))
	if hi > lhi || (hi == lhi && lo > llo) {
		return limit, false
	}
	q, r := bits.Div64(hi, lo, uint64(rate))
	if r != 0 {
		q++
	}
	return time.Duration(q), false
}

// Lower sets b to level when b holds more, dropping its fraction; a level
// below the debt floor (−2 × capacity) is taken at the floor. It reports
// whether b now holds that level (it held it or more: b was no lower).
func (b *Bucket) Lower(level, capacity int64) bool {
	level = max(level, -2*capacity)
	if level < b.Level {
		b.Level, b.Frac = level, 0
	}
	return b.Level == level
}

// Adjust applies a reconcile: delta > 0 debits forward (the level may go
// negative, floored at -2*capacity so one bad reading cannot wedge a bucket
// for long), delta < 0 credits back (capped at capacity).
func (b *Bucket) Adjust(delta, capacity int64) {
	l := b.Level - delta
	switch {
	case delta > 0 && (l > b.Level || l < -2*capacity): // overflow or floor
		l = -2 * capacity
	case delta < 0 && (l < b.Level || l >= capacity): // overflow or cap
		l, b.Frac = capacity, 0
	}
	b.Level = l
}
