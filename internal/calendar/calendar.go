// Package calendar computes calendar periods — days, ISO 8601 weeks and
// months in a time zone — for quota windows that are full again at each
// period's start (see docs/limits.md, "Calendar windows").
//
// A period is a span of the timeline, [start, end), never a duration: a day
// at a DST change lasts 23 or 25 hours, a month 28 to 31 days. Its start is
// the first instant whose local date in the zone is the period's first date
// (the day itself; the Monday of an ISO 8601 week; the 1st of a month), its
// end the next period's start.
//
// The rules for clocks that jump, stated once for every kind. Let first(D)
// be the first instant at which the zone's local date is D or later. It is
// found from the zone's offsets (time.Location's ZoneBounds), never from
// time.Date, which is unspecified inside a DST gap (Havana and Santiago give
// 23:00 of the day before, Beirut 01:00):
//
//   - A midnight that does not exist (a DST jump at 00:00) starts the day at
//     its first instant: first(D) is where the jump lands (01:00).
//   - A date the zone skipped (Pacific/Apia's 2011-12-30) is never reached
//     at its own first instant: first(D) = first(D+1), so it has no period.
//     A week or month whose first date was skipped starts at the first
//     instant of the next date that exists.
//   - A clock that goes back across midnight (Alaska's 1867 change from
//     +15:02 to -8:57 repeats a date) does not reopen the earlier date: the
//     later date's period started when that date was first reached and lasts
//     until the next date's first instant, so the repeated local hours belong
//     to it. first is monotone in D, so the periods are a partition of the
//     timeline in order.
//
// The period holding t is the one of the latest first date D with
// first(D) <= t; its end is first of the next first date, which is > t.
// Consecutive periods tile the timeline: the end of one is the start of the
// next. Transitions fall on whole seconds, so starts and ends do too.
package calendar

import (
	"time"
)

// Kind is a calendar period kind; its values equal llmrate.Calendar's:
// 1 day, 2 week, 3 month. Any other value is treated as Day.
type Kind uint8

// The period kinds.
const (
	Day   Kind = 1 // 00:00 to 00:00 of the next date
	Week  Kind = 2 // Monday 00:00 to the next Monday 00:00 (ISO 8601)
	Month Kind = 3 // the 1st at 00:00 to the next month's 1st at 00:00
)

// String returns "day", "week" or "month" ("day" for any other value, as
// Period treats it).
func (k Kind) String() string {
	switch k {
	case Week:
		return "week"
	case Month:
		return "month"
	default:
		return "day"
	}
}

// secondsPerDay is a civil day's length on the proleptic UTC calendar that
// dates are numbered on here (no zone, no DST): date arithmetic only, never
// used to step through a zone's clock.
const secondsPerDay = 86400

// Period returns the period of kind k in zone loc that holds instant t:
// [start, end) with start <= t < end, start the first instant whose local
// date in loc is the period's first date (see the package doc for gaps,
// skipped dates and clocks that go back), end the next period's start. Both
// are in loc. A nil loc is UTC. It allocates nothing and costs a few zone
// lookups (BenchmarkPeriod); Cache saves them while t stays in one period.
func Period(k Kind, loc *time.Location, t time.Time) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	s, e := period(k, loc, t.Unix())
	return time.Unix(s, 0).In(loc), time.Unix(e, 0).In(loc)
}

// period is Period on Unix seconds; u = floor(t), and since every first
// instant is a whole second, first(D) <= t iff first(D) <= u, and
// first(D) > t iff first(D) > u.
func period(k Kind, loc *time.Location, u int64) (start, end int64) {
	// The local date of u is reached by u, so first(d) <= u: the period's
	// first date is this date's, or a later one when the clock went back.
	y, m, dd := time.Unix(u, 0).In(loc).Date()
	d := periodDate(k, civil(y, m, dd))
	start = first(loc, d)
	next := nextDate(k, d)
	end = first(loc, next)
	// Invariant: first(d) = start <= u. Step to later first dates while they
	// are reached by u (a repeated date; a skipped one, whose first instant
	// is its successor's). Each step raises d by at least a day, and the
	// loop ends because first grows without bound.
	for end <= u {
		d, start = next, end
		next = nextDate(k, d)
		end = first(loc, next)
	}
	// Now start <= u < end, and end > start since end > u >= start.
	return start, end
}

// civil returns the date's midnight on the UTC calendar in Unix seconds:
// the number that names the date (time.Date in UTC normalises overflowing
// days and months; UTC has no gaps).
func civil(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()
}

// periodDate returns the first date of the period of kind k holding date d
// (dates as civil numbers): d; the Monday on or before d; the 1st of d's
// month.
func periodDate(k Kind, d int64) int64 {
	switch k {
	case Week:
		wd := time.Unix(d, 0).UTC().Weekday() // Sunday = 0
		return d - int64((wd+6)%7)*secondsPerDay
	case Month:
		y, m, _ := time.Unix(d, 0).UTC().Date()
		return civil(y, m, 1)
	default:
		return d
	}
}

// nextDate returns the first date of the period of kind k after the one
// that starts on date d.
func nextDate(k Kind, d int64) int64 {
	switch k {
	case Week:
		return d + 7*secondsPerDay
	case Month:
		y, m, _ := time.Unix(d, 0).UTC().Date()
		return civil(y, m+1, 1)
	default:
		return d + secondsPerDay
	}
}

// lookBehind bounds how far before a date's UTC midnight the zone can
// already show that date: more than any UTC offset (tzdata's extremes are
// within ±16 h), so every instant before w - lookBehind shows an earlier
// date whatever its offset.
const lookBehind = 2 * secondsPerDay

// first returns first(D) for the date whose civil number is w: the smallest
// instant t whose local wall clock t + offset(t) is at or past w's midnight.
//
// The wall clock is t + off on each stretch of constant offset [a, b), so on
// that stretch the smallest such t is max(a, w-off) if that is below b.
// Walk the stretches forward from w - lookBehind (where the wall clock is
// still below w) with ZoneBounds; the first stretch that holds one holds
// the smallest. The walk ends: offsets are bounded, so w - off is reached.
func first(loc *time.Location, w int64) int64 {
	at := w - lookBehind
	for {
		t := time.Unix(at, 0).In(loc)
		_, off := t.Zone()
		_, b := t.ZoneBounds()
		c := w - int64(off)
		if c < at {
			c = at
		}
		if b.IsZero() || c < b.Unix() { // else b > at: ZoneBounds' end follows t
			return c
		}
		at = b.Unix()
	}
}
