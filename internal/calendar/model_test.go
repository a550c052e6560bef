package calendar

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
	_ "time/tzdata" // the zones of fallbackZones where the system has no tzdata

	"github.com/stretchr/testify/require"
)

// The model test: every zone of the system's tzdata, against a reference
// that finds each period's first instant another way than the code under
// test. The code walks the zone's offsets with ZoneBounds and solves
// t + offset = midnight arithmetically; the reference finds the zone's
// transitions by sampling Zone() once a day and bisecting to the second,
// and takes the least candidate instant (a transition, or midnight minus a
// stretch's offset) whose local date, as time.Time.Date reports it, is at
// or past the date.

// refZone is the reference's view of one zone over [from, to].
type refZone struct {
	loc      *time.Location
	from, to int64
	trans    []int64 // instants where the offset changes, ascending
	memo     map[int64]int64
}

func offsetAt(loc *time.Location, u int64) int {
	_, off := time.Unix(u, 0).In(loc).Zone()
	return off
}

// refStep is how often newRefZone samples a zone's offset.
const refStep = 3 * 86400

// newRefZone samples loc's offset every refStep over [from, to] and bisects
// each change to the exact second. A change and its reversal within one
// step would be missed (tzdata has none that short; a miss would show as a
// mismatch, not a pass).
func newRefZone(loc *time.Location, from, to int64) *refZone {
	z := &refZone{loc: loc, from: from, to: to, memo: map[int64]int64{}}
	cur, po := from, offsetAt(loc, from)
	for cur < to {
		nxt := min(cur+refStep, to)
		if offsetAt(loc, nxt) == po {
			cur = nxt
			continue
		}
		lo, hi := cur, nxt // offset(lo) == po != offset(hi)
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if offsetAt(loc, mid) == po {
				lo = mid
			} else {
				hi = mid
			}
		}
		z.trans = append(z.trans, hi)
		cur, po = hi, offsetAt(loc, hi)
	}
	return z
}

// date is a local date as time.Time.Date gives it.
type date struct {
	y int
	m time.Month
	d int
}

func (a date) less(b date) bool {
	if a.y != b.y {
		return a.y < b.y
	}
	if a.m != b.m {
		return a.m < b.m
	}
	return a.d < b.d
}

func dateOf(t time.Time) date {
	y, m, d := t.Date()
	return date{y, m, d}
}

func (z *refZone) localDate(u int64) date { return dateOf(time.Unix(u, 0).In(z.loc)) }

// first returns the first instant whose local date is d or later.
func (z *refZone) first(t *testing.T, d date) int64 {
	w := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC).Unix()
	if v, ok := z.memo[w]; ok {
		return v
	}
	lo, hi := w-2*86400, w+2*86400
	if lo < z.from || hi > z.to {
		require.Failf(t, "reference", "window for %v outside [%d, %d]", d, z.from, z.to)
	}
	cands := []int64{lo, w - int64(offsetAt(z.loc, lo))}
	i := sort.Search(len(z.trans), func(i int) bool { return z.trans[i] > lo })
	for ; i < len(z.trans) && z.trans[i] < hi; i++ {
		x := z.trans[i]
		cands = append(cands, x, w-int64(offsetAt(z.loc, x)))
	}
	best := int64(0)
	found := false
	for _, c := range cands {
		if c < lo || c > hi || z.localDate(c).less(d) {
			continue
		}
		if !found || c < best {
			best, found = c, true
		}
	}
	if !found || !z.localDate(best-1).less(d) {
		require.Failf(t, "reference", "no first instant of %v in %s (found %v at %d)", d, z.loc, found, best)
	}
	z.memo[w] = best
	return best
}

// checker holds one zone's reference and the code's cache.
type checker struct {
	t     *testing.T
	z     *refZone
	cache Cache
	rng   *rand.Rand
	n     int // periods checked
}

// wantPeriod checks that Period, or Cache.Period with cached, of kind k at
// instant at is [s, e) in the zone. (No t.Helper here or below: it costs a
// stack walk per call, most of this test's time; messages say where.)
func (c *checker) wantPeriod(k Kind, at time.Time, s, e int64, cached bool) {
	var gs, ge time.Time
	if cached {
		gs, ge = c.cache.Period(k, c.z.loc, at)
	} else {
		gs, ge = Period(k, c.z.loc, at)
	}
	if gs.Unix() != s || ge.Unix() != e || gs.Nanosecond() != 0 || ge.Nanosecond() != 0 || gs.Location() != c.z.loc {
		require.Failf(c.t, "period mismatch", "Period(%v, %s, %v) (cached %v) = [%v, %v) in %s, want [%v, %v)",
			k, c.z.loc, at.UTC(), cached, gs.UTC(), ge.UTC(), gs.Location(), time.Unix(s, 0).UTC(), time.Unix(e, 0).UTC())
	}
}

// check checks the period of kind k whose first date is d and whose next
// period's first date is next: at its start, its last nanosecond, an
// instant inside, and that the next period starts at its end (tiling).
//
// Weeks and months are checked back to back, so the next check's start is
// this one's end; days are not, so tiled asks for the next day's start.
func (c *checker) check(k Kind, d, next date, tiled bool) {
	s, e := c.z.first(c.t, d), c.z.first(c.t, next)
	if e == s {
		return // d was skipped: no period of its own (the hand cases pin what holds it)
	}
	if s > e {
		require.Failf(c.t, "reference", "period of %v in %s ends before it starts", d, c.z.loc)
	}
	c.wantPeriod(k, time.Unix(s, 0), s, e, false)
	c.wantPeriod(k, time.Unix(e, 0).Add(-time.Nanosecond), s, e, false)
	c.wantPeriod(k, time.Unix(s, 0).Add(time.Duration(c.rng.Int64N((e-s)*1e9))), s, e, true)
	if tiled {
		if ns, _ := Period(k, c.z.loc, time.Unix(e, 0)); ns.Unix() != e {
			require.Failf(c.t, "not tiled", "%v of %v in %s: period after [%v, %v) starts at %v", k, d, c.z.loc,
				time.Unix(s, 0).UTC(), time.Unix(e, 0).UTC(), ns.UTC())
		}
	}
	c.n++
}

func utcDate(y int, m time.Month, d int) date {
	return dateOf(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
}

func (d date) addDays(n int) date {
	return dateOf(time.Date(d.y, d.m, d.d+n, 0, 0, 0, 0, time.UTC))
}

// checkRange checks, over local dates [fromY-01-01, toY-12-31]: every
// month, every ISO week, every day within two of a local date on which the
// offset changes, and days more drawn at random.
func (c *checker) checkRange(fromY, toY, randomDays int, allDays bool) {
	for y := fromY; y <= toY; y++ {
		for m := time.January; m <= time.December; m++ {
			c.check(Month, utcDate(y, m, 1), utcDate(y, m+1, 1), false)
		}
	}
	mon := utcDate(fromY, time.January, 1)
	for time.Date(mon.y, mon.m, mon.d, 0, 0, 0, 0, time.UTC).Weekday() != time.Monday {
		mon = mon.addDays(-1)
	}
	last := utcDate(toY, time.December, 31)
	for ; !last.less(mon); mon = mon.addDays(7) {
		c.check(Week, mon, mon.addDays(7), false)
	}
	lo := time.Date(fromY, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(toY+1, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
	days := map[date]bool{}
	if allDays {
		for d := utcDate(fromY, time.January, 1); !last.less(d); d = d.addDays(1) {
			days[d] = true
		}
	}
	for _, x := range c.z.trans {
		if x < lo || x >= hi {
			continue
		}
		d := c.z.localDate(x)
		for i := -2; i <= 2; i++ {
			days[d.addDays(i)] = true
		}
	}
	span := int((hi - lo) / 86400)
	for range randomDays {
		days[utcDate(fromY, time.January, 1+c.rng.IntN(span))] = true
	}
	for d := range days {
		c.check(Day, d, d.addDays(1), true)
	}
}

// fallbackZones stand in for the system's tzdata where it has none
// (the embedded time/tzdata answers for them).
var fallbackZones = []string{
	"UTC", "Europe/Berlin", "Europe/London", "America/New_York", "America/Havana",
	"America/Santiago", "America/Asuncion", "Asia/Beirut", "Asia/Tokyo", "Asia/Kolkata",
	"Asia/Kathmandu", "Australia/Lord_Howe", "Pacific/Chatham", "Pacific/Apia",
	"Pacific/Kiritimati", "Africa/Casablanca", "Antarctica/Troll", "America/St_Johns",
}

// systemZones returns every zone file under /usr/share/zoneinfo (not the
// posix/ and right/ copies), or fallbackZones if there are none.
func systemZones(t *testing.T) []string {
	const root = "/usr/share/zoneinfo"
	var names []string
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if e.IsDir() {
			if n := e.Name(); n == "posix" || n == "right" {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(b, []byte("TZif")) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if len(names) == 0 {
		t.Logf("no tzdata under %s: checking %d zones from the embedded time/tzdata", root, len(fallbackZones))
		return fallbackZones
	}
	return names
}

func seedFor(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

func newChecker(t *testing.T, loc *time.Location, fromY, toY int) *checker {
	from := time.Date(fromY-1, time.December, 1, 0, 0, 0, 0, time.UTC).Unix()
	to := time.Date(toY+1, time.February, 1, 0, 0, 0, 0, time.UTC).Unix()
	return &checker{t: t, z: newRefZone(loc, from, to), rng: rand.New(rand.NewPCG(1, seedFor(loc.String())))}
}

// TestPeriodEveryZone checks 2020–2035 in every zone: all months and weeks,
// every day within two days of an offset change, and 8 random days.
func TestPeriodEveryZone(t *testing.T) {
	t.Parallel()
	names := systemZones(t)
	const shards = 2 // one per core of CI's smallest runner
	for i := range shards {
		t.Run(fmt.Sprintf("shard%d", i), func(t *testing.T) {
			t.Parallel()
			zones, periods := 0, 0
			for j := i; j < len(names); j += shards {
				loc, err := time.LoadLocation(names[j])
				require.NoError(t, err, "LoadLocation(%q)", names[j])
				c := newChecker(t, loc, 2020, 2035)
				c.checkRange(2020, 2035, 8, false)
				zones, periods = zones+1, periods+c.n
			}
			t.Logf("%d zones, %d periods", zones, periods)
		})
	}
}

// TestPeriodHistoricZones checks every day, week and month of years in
// which zones skipped a date, repeated one, or jumped at midnight.
func TestPeriodHistoricZones(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		zone     string
		from, to int
	}{
		{"Pacific/Apia", 2011, 2012},       // skipped 2011-12-30
		{"Pacific/Kwajalein", 1993, 1993},  // skipped 1993-08-21
		{"Pacific/Kiritimati", 1994, 1995}, // skipped 1994-12-31
		{"Asia/Manila", 1844, 1845},        // skipped 1844-12-31
		{"America/Juneau", 1867, 1867},     // repeated 1867-10-18
		{"America/Phoenix", 1943, 1944},    // back across New Year's midnight
		{"America/St_Johns", 1987, 1988},   // back across midnight, 2 h in 1988
		{"America/Asuncion", 2019, 2019},   // midnight gap
		{"Antarctica/Casey", 2010, 2010},   // back 3 h across midnight
	} {
		loc, err := time.LoadLocation(tc.zone)
		require.NoError(t, err)
		c := newChecker(t, loc, tc.from, tc.to)
		c.checkRange(tc.from, tc.to, 0, true)
	}
}
