package memstore

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Entry holds the two buckets of one key (within its workspace) or of one
// workspace. Last is the latest clock reading seen: refill is computed from
// it and a clock that moves backwards refills nothing.
//
// lk is the entry's lock (bit 0) and its place in the LRU order (the other
// bits: the shard's epoch at its latest use, see shardState.epoch): one
// 4-byte word for both keeps an entry at 56 bytes. Every field
// but lk is read and written under the entry's lock; h is written under
// the shard's lock too, so a writer holding the shard's lock may read any
// entry's h without the entry's.
type Entry struct {
	h    uint64 // the entry's hash in its table; 0 once deleted
	Last int64
	Req  Bucket
	Tok  Bucket
	lk   atomic.Uint32
	mark mark // when time alone refills the entry; the solo flag
}

// mark packs, in what would otherwise be padding (an entry stays 56 bytes),
// the seconds after entry.last by which time alone refills both buckets to
// full under the figures of the entry's latest admission or reconcile
// (fullNever: not within 34 years, or not known to), in its top bit
// whether a workspace entry was last used by a Solo request (it then holds
// its key's buckets too), and in the next whether the entry holds only
// levels another store reported (Follow) and nothing spent here since:
// dropping it loses nothing that store does not hold.
type mark uint32

const (
	markSolo     mark = 1 << 31
	markFollowed mark = 1 << 30
	fullNever         = 1<<30 - 1
)

func (m mark) solo() bool       { return m&markSolo != 0 }
func (m mark) followed() bool   { return m&markFollowed != 0 }
func (m mark) fullIn() int64    { return int64(m &^ (markSolo | markFollowed)) }
func (m *mark) setSolo(on bool) { *m = *m&^markSolo | mark(boolBit(on))<<31 }

// setFullIn sets the seconds to full, and clears followed: it is set by an
// admission's, a reconcile's or a fill's settling, which spend here.
func (m *mark) setFullIn(s int64) { *m = *m&markSolo | mark(s) }

// SetSolo records whether e, a workspace entry, was last used by a Solo
// request.
func (e *Entry) SetSolo(on bool) { e.mark.setSolo(on) }

// Solo reports whether e was last used by a Solo request.
func (e *Entry) Solo() bool { return e.mark.solo() }

func boolBit(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Advance refills both buckets up to now at rpm requests and tpm tokens a minute. A clock reading earlier
// than the latest seen refills nothing; the latest is kept.
func (e *Entry) Advance(now int64, rpm, tpm int64) {
	dt := now - e.Last
	if dt > 0 {
		e.Last = now
	} else {
		dt = 0
	}
	e.Req.Refill(rpm, 2*rpm, dt)
	e.Tok.Refill(tpm, 2*tpm, dt)
}

// Settle records, after an admission or reconcile under lim, when time
// alone will have refilled e to full under lim: within fullIdleSeconds
// when neither Bucket is in debt (each is at most capacity, 2 minutes of
// refill, below full), else the exact time, rounded up to the second. An
// entry held to figures smaller than those of its debt may owe far longer
// than the 6 minutes a debt at its own figures takes (issue 18 item 9).
//
// The common case (no debt) is small enough to inline into the root's
// decisions; a debt's exact time is settleDebt's.
func (e *Entry) Settle(rpm, tpm int64) {
	if e.Req.Level|e.Tok.Level < 0 {
		e.settleDebt(rpm, tpm)
	} else {
		e.mark = e.mark&markSolo | fullIdleSeconds // setFullIn, within the inlining budget
	}
}

// settleDebt is Settle for an entry in debt.
func (e *Entry) settleDebt(rpm, tpm int64) {
	e.mark.setFullIn(max(secondsToFull(e.Req, rpm), secondsToFull(e.Tok, tpm)))
}

// secondsToFull is the time, in whole seconds rounded up, until time alone
// refills b to its capacity (2×rate) at rate units per minute; fullNever
// when that is beyond fullNever seconds or rate is not positive.
func secondsToFull(b Bucket, rate int64) int64 {
	if rate <= 0 {
		return fullNever
	}
	const limit = time.Duration(fullNever) * time.Second
	d, _ := b.Wait(2*rate, rate, 2*rate, limit)
	if d >= limit {
		return fullNever
	}
	return int64((d + time.Second - 1) / time.Second)
}

// idleFull reports whether time alone has certainly refilled e to full by
// now, under the figures of its latest admission or reconcile.
func (e *Entry) idleFull(now int64) bool {
	in := e.mark.fullIn()
	return in < fullNever && now-e.Last >= in*int64(time.Second)
}

// inDebt reports whether a Bucket of e was below zero after its latest
// admission or reconcile: such an entry is dropped only once idleFull.
func (e *Entry) inDebt() bool { return e.Req.Level < 0 || e.Tok.Level < 0 }

// fill makes e full as of now under lim.
func (e *Entry) fill(now int64, rpm, tpm int64) {
	e.Last = now
	e.Req = Bucket{Level: 2 * rpm}
	e.Tok = Bucket{Level: 2 * tpm}
	e.mark.setFullIn(0)
}

// GetEntry returns the entry for k, locked, creating it full if absent. The
// caller holds sh.mu (and may hold a key entry, when sh is a workspace
// shard). Creating may first drop entries that time alone has refilled
// (lossless), and, at the bound, the least recently used of a sample of
// entries not in debt (lossy, added to ev.Lossy). When the sample holds
// only debts, the entry is added beyond the bound (ev.Over) unless the
// table is at its hard limit.
func (sh *Shard) GetEntry(bound int, k uint64, rpm, tpm, now int64, ev *Evicted) *Entry {
	if e := sh.t.Get(k); e != nil {
		e.Lock()
		return e
	}
	sh.epoch.Add(1)
	if sh.t.n >= sh.sweepAt {
		// Amortised: drop every entry that time alone has refilled.
		sh.t.Each(0, func(old *Entry) bool {
			old.Lock()
			if old.idleFull(now) {
				sh.t.Delete(old)
			}
			old.Unlock()
			return true
		})
		sh.sweepAt = max(minSweep, 2*sh.t.n)
	}
	if sh.t.n >= bound {
		makeRoom(sh, bound, now, ev)
	}
	e := sh.t.Insert(k)
	e.fill(now, rpm, tpm)
	return e
}

// makeRoom makes room for one entry in a shard at its bound; the caller
// holds sh.Mu. Visiting entries from a random place, it drops those
// already full, and those only Follow set (lossless: the shared store
// holds them), until the shard is below its bound, else the
// least recently used of up to evictSample entries not in debt (lossy).
// Entries in debt are passed over: when only debts were found, the shard
// goes beyond its bound (ev.Over) rather than forget one, unless the table
// is at its hard limit (maxTableEntries), where the least recently used
// entry visited goes whatever it owes.
//
// Recency is the shard's epoch at an entry's latest use (entry.used): the
// age is how many insertions into the shard came since. Ties go to the
// entry visited first. The two entries chosen so far stay locked, so
// that what made them candidates still holds when one is dropped.
func makeRoom(sh *Shard, bound int, now int64, ev *Evicted) {
	var victim, anyVictim *Entry
	var oldest, anyOldest uint32
	cur := sh.epoch.Load()
	visited, candidates := 0, 0
	// drop unlocks e unless it is still a candidate.
	drop := func(e *Entry) {
		if e != nil && e != victim && e != anyVictim {
			e.Unlock()
		}
	}
	sh.t.Each(rand.Uint32(), func(old *Entry) bool {
		visited++
		old.Lock()
		switch age := (cur - old.used()) & epochMask; {
		case old.idleFull(now) || old.mark.followed():
			// Full by now, or a copy of what the shared store holds.
			sh.t.Delete(old)
			old.Unlock()
			if sh.t.n < bound {
				return false
			}
		case old.inDebt():
			if anyVictim == nil || age > anyOldest {
				prev := anyVictim
				anyVictim, anyOldest = old, age
				drop(prev)
			} else {
				old.Unlock()
			}
		default:
			kept := false
			if victim == nil || age > oldest {
				prev := victim
				victim, oldest, kept = old, age, true
				drop(prev)
			}
			if anyVictim == nil || age > anyOldest {
				prev := anyVictim
				anyVictim, anyOldest, kept = old, age, true
				drop(prev)
			}
			if !kept {
				old.Unlock()
			}
			candidates++
		}
		return candidates < evictSample && visited < evictVisit
	})
	switch {
	case sh.t.n < bound:
	case victim != nil:
		sh.t.Delete(victim)
		ev.Lossy++
	case sh.t.n < maxTableEntries:
		ev.Over++
	default:
		sh.t.Delete(anyVictim)
		ev.Lossy++
	}
	if victim != nil {
		victim.Unlock()
	}
	if anyVictim != nil && anyVictim != victim {
		anyVictim.Unlock()
	}
}

// Lower sets each of e's buckets above the level given for it (requests,
// tokens) to that level, floored at the debt floor, and settles e. It
// marks e followed when e then holds what was reported, or was followed
// already: until this store spends on it, it may be dropped for room, in
// debt or not, without loss (makeRoom). An entry below what was reported
// holds spending of this store's own that the shared store has not seen
// (yet): it is not marked.
func (e *Entry) Lower(req, tok int64, rpm, tpm int64) {
	copyOf := e.mark.followed() // settle clears it
	reqAt := e.Req.Lower(req, 2*rpm)
	tokAt := e.Tok.Lower(tok, 2*tpm)
	e.Settle(rpm, tpm)
	if copyOf || reqAt && tokAt {
		e.mark |= markFollowed
	}
}
