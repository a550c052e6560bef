package memstore

import (
	"time"

	"github.com/llmrate/llmrate/internal/calendar"
)

// Calendar and session windows are kept apart from the rolling windows
// (winset.go), in each shard's quota sets, by the hash of the entry they
// belong to, as the rolling windows are: a bucket holds what was spent in
// its period (or open session), not a level, so that a changed figure
// keeps what was spent. A set is dropped only once none of its buckets
// holds anything for a period still in force: it is never evicted (a
// period's spend is kept like a debt).

// QuotaSet is the calendar and session buckets of one entry hash.
type QuotaSet struct {
	Last int64 // the latest clock reading seen: periods never go back
	// Full is the clock reading from which no bucket holds anything (the
	// latest end of a period or session with spend, or of an open
	// session). A caller filling the set may set it to math.MaxInt64 to
	// keep the set from being swept until it calls Settle.
	Full int64
	B    []QuotaBucket
}

// QuotaID is a calendar or session window's identity, as its buckets are
// found (with the meter): its Calendar, whether a session, its Per and
// its zone's name.
type QuotaID struct {
	Cal     calendar.Kind
	Session bool
	Per     int64  // a session's Per
	Zone    string // a calendar's zone name
}

// QuotaBucket is one calendar or session window meter: Spent in [Start,
// End), the period (or the open session; End 0: none open, or no period
// computed yet).
type QuotaBucket struct {
	Meter      uint8 // the index of its meter in the root's WindowMeters rows
	Cal        calendar.Kind
	Session    bool
	Per        int64  // a session's Per
	Zone       string // a calendar's zone name
	Spent      int64
	Start, End int64
}

// ID returns q's window identity.
func (q *QuotaBucket) ID() QuotaID {
	return QuotaID{Cal: q.Cal, Session: q.Session, Per: q.Per, Zone: q.Zone}
}

// Lookup returns the bucket of meter m of window id, nil if absent. (id
// by pointer: a decision passes one for each of a window's meters.)
func (qs *QuotaSet) Lookup(m uint8, id *QuotaID) *QuotaBucket {
	for i := range qs.B {
		if q := &qs.B[i]; q.Meter == m && q.Cal == id.Cal && q.Session == id.Session && q.Per == id.Per && q.Zone == id.Zone {
			return q
		}
	}
	return nil
}

// Find returns the bucket of meter m of window id, created empty if absent.
func (qs *QuotaSet) Find(m uint8, id *QuotaID) *QuotaBucket {
	if q := qs.Lookup(m, id); q != nil {
		return q
	}
	qs.B = append(qs.B, QuotaBucket{Meter: m, Cal: id.Cal, Session: id.Session, Per: id.Per, Zone: id.Zone})
	return &qs.B[len(qs.B)-1]
}

// At brings q to the store's clock now (at least the set's latest
// reading): a calendar bucket into the period holding now in zone loc
// (empty when that is a new one: a period that ended in debt leaves the
// next one full), a session closed once its end has passed.
func (t *Tables) At(q *QuotaBucket, loc *time.Location, now int64) {
	if q.Session {
		if q.End != 0 && now >= q.End {
			q.Spent, q.Start, q.End = 0, 0, 0
		}
		return
	}
	if q.End != 0 && now < q.End {
		return
	}
	start, end := t.cal.Period(q.Cal, loc, time.Unix(0, now))
	q.Spent, q.Start, q.End = 0, start.UnixNano(), end.UnixNano()
}

// Open opens q's session at now if none is open.
func (q *QuotaBucket) Open(now int64) {
	if q.Session && q.End == 0 {
		q.Start, q.End = now, now+q.Per
	}
}

// Add adds delta to what q spent, bounded as a rolling bucket's level is:
// at most 3 × fig (the level floored at −2 × capacity), at least 0 (never
// more than full).
func (q *QuotaBucket) Add(delta, fig int64) {
	q.Spent = min(max(q.Spent+delta, 0), max(q.Spent, 3*fig))
}

// Settle records when no bucket of qs holds anything any more.
func (qs *QuotaSet) Settle() {
	if qs == nil {
		return
	}
	qs.Full = qs.Last
	for i := range qs.B {
		if q := &qs.B[i]; q.End != 0 && (q.Spent != 0 || q.Session) {
			qs.Full = max(qs.Full, q.End)
		}
	}
}

// LastOf is qs's latest clock reading, 0 for a nil set.
func LastOf(qs *QuotaSet) int64 {
	if qs == nil {
		return 0
	}
	return qs.Last
}

// QuotaSetAt returns the quota set of entry hash h in sh, nil if none. The
// caller holds sh.Mu.
func (sh *Shard) QuotaSetAt(h uint64) *QuotaSet { return sh.quotas[h] }

// NewQuotaSet returns a new, empty quota set for entry hash h in sh, which
// has none (QuotaSetAt), its clock at now. The caller holds sh.Mu. Creating one may first drop the sets that hold nothing any more
// (lossless); a set is never evicted: at the bound the shard goes beyond
// it (ev.Over), as for a debt.
func (sh *Shard) NewQuotaSet(bound int, h uint64, now int64, ev *Evicted) *QuotaSet {
	if sh.quotas == nil {
		sh.quotas = make(map[uint64]*QuotaSet)
		sh.quotaSweepAt = minSweep
	}
	if len(sh.quotas) >= sh.quotaSweepAt {
		for k, qs := range sh.quotas {
			if now >= qs.Full {
				delete(sh.quotas, k)
			}
		}
		sh.quotaSweepAt = max(minSweep, 2*len(sh.quotas))
	}
	if len(sh.quotas) >= bound {
		ev.Over++ // beyond the bound: a period's spend is kept like a debt
	}
	qs := &QuotaSet{Last: now, Full: now}
	sh.quotas[h] = qs
	return qs
}

// Follow lowers q to a reported spend in the period (or session) ending at
// reset (zero: q's own period; for a session, none open there), in zone
// loc for a calendar bucket.
func (t *Tables) Follow(q *QuotaBucket, loc *time.Location, spent int64, reset time.Time) {
	if reset.IsZero() {
		if !q.Session {
			q.Spent = max(q.Spent, spent)
		}
		return
	}
	end := reset.UnixNano()
	switch {
	case end == q.End:
		q.Spent = max(q.Spent, spent)
	case end > q.End:
		start := end - q.Per
		if !q.Session {
			st, _ := t.cal.Period(q.Cal, loc, reset.Add(-time.Nanosecond))
			start = st.UnixNano()
		}
		if q.Session && q.End != 0 {
			spent = max(spent, q.Spent) // two sessions: give nothing back
		}
		q.Spent, q.Start, q.End = spent, start, end
	}
}
