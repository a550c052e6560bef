package calendar

import (
	"sync"
	"sync/atomic"
	"time"
)

// Cache memoizes the period in force per (kind, zone name), so the hot path
// does no time.Date or zone lookup while t stays inside it. The zero value
// is ready to use; a Cache is safe for concurrent use and allocation-free on
// a hit.
//
// Zones are identified by name: every
// location of one name must carry the same rules, as time.LoadLocation's do
// within one process. A hit returns the period's instants in the location
// of the call that computed it, which has the same name.
type Cache struct {
	mu    sync.Mutex                       // serialises adding a zone
	zones atomic.Pointer[map[string]*zone] // by zone name; copied on write: read without a lock
}

// zone holds a zone's slots, one per kind: Day, Week, Month at index
// kind-1 (any other kind is Day's, as Period treats it). A map keyed by the
// name alone takes the runtime's string fast path, which for a few keys
// compares rather than hashes.
type zone [3]slot

// slotIndex returns k's index in a zone.
func slotIndex(k Kind) int {
	switch k {
	case Week, Month:
		return int(k) - 1
	default:
		return 0
	}
}

// slot holds the latest period computed for its key. It is replaced whole,
// never modified, so a reader sees one period's start and end together.
type slot struct{ p atomic.Pointer[span] }

// span is one period: [s, e) in Unix seconds for the test, start and end as
// returned.
type span struct {
	s, e       int64
	start, end time.Time
}

// Period returns Period(k, loc, t), from the memoized period of (k, loc's
// name) when t lies inside it; otherwise it computes the period holding t
// and memoizes that one instead (a clock that moved back gets its own
// period, never a stale one). A nil loc is UTC.
func (c *Cache) Period(k Kind, loc *time.Location, t time.Time) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	name := loc.String()
	u := t.Unix() // every bound is a whole second: s <= t iff s <= u, e > t iff e > u
	var z *zone
	if m := c.zones.Load(); m != nil {
		z = (*m)[name]
	}
	if z == nil {
		z = c.add(name)
	}
	sl := &z[slotIndex(k)]
	if sp := sl.p.Load(); sp.s <= u && u < sp.e {
		return sp.start, sp.end
	}
	s, e := period(k, loc, u)
	sp := &span{s: s, e: e, start: time.Unix(s, 0).In(loc), end: time.Unix(e, 0).In(loc)}
	sl.p.Store(sp)
	return sp.start, sp.end
}

// add returns the zone named name, adding it to a copy of the map if no
// other caller has. Its slots hold a placeholder period that no instant
// lies inside ([0, 0)), so a reader never finds one without a period.
func (c *Cache) add(name string) *zone {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.zones.Load()
	if old != nil {
		if z := (*old)[name]; z != nil {
			return z
		}
	}
	m := make(map[string]*zone, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	z := &zone{}
	for i := range z {
		z[i].p.Store(&span{})
	}
	m[name] = z
	c.zones.Store(&m)
	return z
}

// lenOf returns the number of zones in m, 0 for none.
func lenOf(m *map[string]*zone) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
