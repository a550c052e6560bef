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
// Zones are identified by name (DESIGN §21, further rule 15): every
// location of one name must carry the same rules, as time.LoadLocation's do
// within one process. A hit returns the period's instants in the location
// of the call that computed it, which has the same name.
type Cache struct {
	mu    sync.Mutex                    // serialises adding a slot
	slots atomic.Pointer[map[key]*slot] // copied on write: read without a lock
}

// key names one memoized period.
type key struct {
	kind Kind
	zone string
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
	kk := key{kind: k, zone: loc.String()}
	u := t.Unix() // every bound is a whole second: s <= t iff s <= u, e > t iff e > u
	var sl *slot
	if m := c.slots.Load(); m != nil {
		sl = (*m)[kk]
	}
	if sl != nil {
		if sp := sl.p.Load(); sp.s <= u && u < sp.e {
			return sp.start, sp.end
		}
	} else {
		sl = c.add(kk)
	}
	s, e := period(k, loc, u)
	sp := &span{s: s, e: e, start: time.Unix(s, 0).In(loc), end: time.Unix(e, 0).In(loc)}
	sl.p.Store(sp)
	return sp.start, sp.end
}

// add returns the slot for kk, adding it to a copy of the map if no other
// caller has. A new slot holds a placeholder period that no instant lies
// inside ([0, 0)), so a reader never finds one without a period.
func (c *Cache) add(kk key) *slot {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.slots.Load()
	if old != nil {
		if sl := (*old)[kk]; sl != nil {
			return sl
		}
	}
	m := make(map[key]*slot, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	sl := &slot{}
	sl.p.Store(&span{})
	m[kk] = sl
	c.slots.Store(&m)
	return sl
}

// lenOf returns the number of slots in m, 0 for none.
func lenOf(m *map[key]*slot) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
