package calendar

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// samePeriod reports whether [s1, e1) and [s2, e2) are one period.
func samePeriod(s1, e1, s2, e2 time.Time) bool { return s1.Equal(s2) && e1.Equal(e2) }

// TestCacheFollowsTheClock walks every period of 2026, forward then back,
// in zones with midnight gaps and 23/25 h days, for every kind in one Cache:
// at each period's first instant, its last nanosecond and a second inside,
// each answer is Period's.
func TestCacheFollowsTheClock(t *testing.T) {
	t.Parallel()
	var c Cache
	zones := []*time.Location{time.UTC, mustLoad(t, "Europe/Berlin"), mustLoad(t, "America/Havana"), mustLoad(t, "Asia/Tokyo")}
	from, to := mustTime(t, "2026-01-01T00:00:00Z"), mustTime(t, "2027-01-01T00:00:00Z")
	check := func(k Kind, loc *time.Location, at time.Time) (start, end time.Time) {
		ws, we := Period(k, loc, at)
		gs, ge := c.Period(k, loc, at)
		if !samePeriod(ws, we, gs, ge) {
			require.Failf(t, "cache", "Cache.Period(%v, %s, %v) = [%v, %v), Period's [%v, %v)", k, loc, at, gs, ge, ws, we)
		}
		return ws, we
	}
	for _, loc := range zones {
		for _, k := range []Kind{Day, Week, Month} {
			var ends []time.Time
			for at := from; at.Before(to); {
				s, e := check(k, loc, at)
				check(k, loc, s.Add(time.Second))
				check(k, loc, e.Add(-time.Nanosecond))
				ends = append(ends, e)
				at = e
			}
			for i := len(ends) - 1; i >= 0; i-- { // a clock that goes back gets its own period, never a stale one
				check(k, loc, ends[i].Add(-time.Nanosecond))
				check(k, loc, ends[i])
			}
		}
	}
}

// TestCacheKeysByKindAndZoneName: one instant, different kinds and zones,
// different periods; another location of the same name shares the slot.
func TestCacheKeysByKindAndZoneName(t *testing.T) {
	t.Parallel()
	var c Cache
	at := mustTime(t, "2026-03-29T12:00:00Z")
	berlin, tokyo := mustLoad(t, "Europe/Berlin"), mustLoad(t, "Asia/Tokyo")
	for _, tc := range []struct {
		k   Kind
		loc *time.Location
	}{{Day, berlin}, {Day, tokyo}, {Week, berlin}, {Month, berlin}, {Month, tokyo}, {Day, time.UTC}, {Day, nil}} {
		ws, we := Period(tc.k, tc.loc, at)
		for range 2 { // the miss, then the hit
			gs, ge := c.Period(tc.k, tc.loc, at)
			assert.True(t, samePeriod(ws, we, gs, ge), "Cache.Period(%v, %v, %v) = [%v, %v), want [%v, %v)", tc.k, tc.loc, at, gs, ge, ws, we)
		}
	}
	// A second location named Europe/Berlin: the same rules, the same slot.
	again, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	gs, ge := c.Period(Day, again, at)
	ws, we := Period(Day, berlin, at)
	assert.True(t, samePeriod(ws, we, gs, ge), "Cache.Period(Day, another Europe/Berlin) = [%v, %v)", gs, ge)
	assert.Len(t, *c.zones.Load(), 3, "zones: Berlin, Tokyo, UTC (nil is UTC)")
}

// TestCacheConcurrent: goroutines on several keys cross a period boundary
// together (run under -race, it checks the slot's publication).
func TestCacheConcurrent(t *testing.T) {
	t.Parallel()
	berlin := mustLoad(t, "Europe/Berlin")
	synctest.Test(t, func(t *testing.T) {
		var c Cache
		// Around the 25 h day's end, Berlin 2026-10-25 24:00 = 23:00Z.
		boundary := mustTime(t, "2026-10-25T23:00:00Z")
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 500 {
					at := boundary.Add(time.Duration((i*7+g*13)%200-100) * time.Second)
					k := Kind(1 + (i+g)%3)
					ws, we := Period(k, berlin, at)
					gs, ge := c.Period(k, berlin, at)
					if !samePeriod(ws, we, gs, ge) {
						t.Errorf("Cache.Period(%v, Berlin, %v) = [%v, %v), want [%v, %v)", k, at, gs, ge, ws, we)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

func TestCacheHitAllocatesNothing(t *testing.T) {
	var c Cache
	loc := mustLoad(t, "Europe/Berlin")
	at := mustTime(t, "2026-10-25T12:00:00Z")
	c.Period(Month, loc, at)
	allocs := testing.AllocsPerRun(1000, func() {
		c.Period(Month, loc, at)
	})
	assert.Zero(t, allocs, "Cache.Period allocations per hit")
}

func BenchmarkCachePeriodHit(b *testing.B) {
	var c Cache
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(b, err)
	at := time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC)
	c.Period(Month, loc, at)
	b.ReportAllocs()
	for b.Loop() {
		c.Period(Month, loc, at)
	}
}

func BenchmarkPeriod(b *testing.B) {
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(b, err)
	at := time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		Period(Day, loc, at)
	}
}
