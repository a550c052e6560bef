package memstore

import (
	"runtime"
	"sync/atomic"
)

// Table maps a 64-bit hash to an Entry, compactly: an open-addressing
// index of 4-byte slots (linear probing, at most 3/4 full) over entries kept
// in fixed-size chunks, so an Entry costs its own 56 bytes plus 5 to 11
// bytes of index, where a Go map of pointers costs 24 to 38 more. Entries
// never move and chunks are never freed; a deleted entry's place is reused.
//
// A slot is 0 (empty) or tag<<24 | (index+1): the low 24 bits locate the
// Entry, the top 8 hold hash bits that rule out most mismatches without
// touching the entry. A table holds at most maxTableEntries entries.
//
// Writers (insert, delete, each) hold the shard's lock. Readers may also
// look up without it (lookup): the index is an array of atomic slots behind
// an atomic pointer (grow publishes a new array; the old one stays as it
// was), and the chunks are published through an atomic directory before
// any slot points into them. Such a lookup can miss an Entry that a
// concurrent delete's backward shift or a grow is moving, or find a slot
// whose Entry was deleted or reused since: it locks the Entry and checks
// its hash, and a caller that misses takes the shard's lock and looks
// again (get).
type Table struct {
	idx    atomic.Pointer[slotIndex]
	dir    atomic.Pointer[[]*entryChunk] // chunks, for lock-free readers
	chunks []*entryChunk                 // the same, for writers
	free   []uint32                      // indexes of deleted entries, for reuse
	n      int                           // live entries
	top    uint32                        // indexes handed out so far
}

// slotIndex is one generation of a table's index: written only until grow
// replaces it.
type slotIndex struct {
	mask  uint64
	slots []atomic.Uint32
}

type entryChunk [chunkSize]Entry

const (
	chunkBits       = 6
	chunkSize       = 1 << chunkBits
	slotIndexBits   = 24
	slotIndexMask   = 1<<slotIndexBits - 1
	maxTableEntries = slotIndexMask - 1
	minTableSlots   = 16
)

// tableHash maps a hash to the one stored: 0 marks a deleted Entry, so a
// hash of 0 is stored as 1 (a collision of probability 2^-64, as any).
func tableHash(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

func slotTag(h uint64) uint32 { return uint32(h>>48) & 0xFF << slotIndexBits }

// at returns the Entry at idx, for a writer.
func (t *Table) at(idx uint32) *Entry {
	return &t.chunks[idx>>chunkBits][idx&(chunkSize-1)]
}

// slotCount returns the index's size.
func (t *Table) slotCount() int {
	if p := t.idx.Load(); p != nil {
		return len(p.slots)
	}
	return 0
}

// Get returns the Entry for h, or nil. The caller holds the shard's lock;
// the Entry is not locked.
func (t *Table) Get(h uint64) *Entry {
	p := t.idx.Load()
	if t.n == 0 || p == nil {
		return nil
	}
	h = tableHash(h)
	tag := slotTag(h)
	for i := h & p.mask; ; i = (i + 1) & p.mask {
		s := p.slots[i].Load()
		if s == 0 {
			return nil
		}
		if s&^slotIndexMask == tag {
			if e := t.at(s&slotIndexMask - 1); e.h == h {
				return e
			}
		}
	}
}

// Lookup returns the Entry for h locked, or nil, without the shard's lock.
// nil does not prove h absent: the caller then takes the shard's lock and
// calls get. A returned Entry holds h (checked under its lock), so it
// stays h's until unlocked: deleting an Entry takes its lock.
func (t *Table) Lookup(h uint64) *Entry {
	p := t.idx.Load()
	if p == nil {
		return nil
	}
	h = tableHash(h)
	tag := slotTag(h)
	// A probe never needs more than the whole index; a bound keeps a probe
	// racing writers finite whatever it sees.
	for i, k := h&p.mask, uint64(0); k <= p.mask; i, k = (i+1)&p.mask, k+1 {
		s := p.slots[i].Load()
		if s == 0 {
			return nil
		}
		if s&^slotIndexMask != tag {
			continue
		}
		idx := s&slotIndexMask - 1
		d := t.dir.Load() // loaded after the slot: holds its chunk
		if d == nil || int(idx>>chunkBits) >= len(*d) {
			return nil
		}
		e := &(*d)[idx>>chunkBits][idx&(chunkSize-1)]
		e.Lock()
		if e.h == h {
			return e
		}
		e.Unlock() // another hash's Entry, or one deleted or reused since
	}
	return nil
}

// Insert adds an Entry for h, which must be absent, and returns it locked,
// its fields zero: the caller fills it before unlocking, so that no
// lock-free lookup sees it unfilled. The caller keeps the table under
// maxTableEntries.
func (t *Table) Insert(h uint64) *Entry {
	h = tableHash(h)
	if (t.n+1)*4 > t.slotCount()*3 {
		t.grow()
	}
	var idx uint32
	if k := len(t.free); k > 0 {
		idx, t.free = t.free[k-1], t.free[:k-1]
	} else {
		idx = t.top
		t.top++
		if int(idx>>chunkBits) == len(t.chunks) {
			// append never writes below the old length, where readers of
			// an older directory read.
			t.chunks = append(t.chunks, new(entryChunk))
			d := t.chunks
			t.dir.Store(&d)
		}
	}
	e := t.at(idx)
	// A lookup that found this place before its Entry was deleted may hold
	// its lock for a moment, to see that the hash is not its own.
	e.Lock()
	e.h, e.Last, e.Req, e.Tok, e.mark = h, 0, Bucket{}, Bucket{}, 0
	place(t.idx.Load(), h, slotTag(h)|(idx+1))
	t.n++
	return e
}

// place puts slot s in the first empty slot of p from h's home.
func place(p *slotIndex, h uint64, s uint32) {
	i := h & p.mask
	for p.slots[i].Load() != 0 {
		i = (i + 1) & p.mask
	}
	p.slots[i].Store(s)
}

// grow publishes an index twice the size (readers of the old one keep a
// consistent, if stale, view).
func (t *Table) grow() {
	old := t.idx.Load()
	n := minTableSlots
	if old != nil {
		n = 2 * len(old.slots)
	}
	p := &slotIndex{mask: uint64(n - 1), slots: make([]atomic.Uint32, n)}
	if old != nil {
		for i := range old.slots {
			if s := old.slots[i].Load(); s != 0 {
				place(p, t.at(s&slotIndexMask-1).h, s)
			}
		}
	}
	t.idx.Store(p)
}

// Delete removes e, which must be in the table and locked by the caller.
// Later slots of its probe run shift back (no tombstones), so lookups stay
// short.
func (t *Table) Delete(e *Entry) {
	h := e.h
	p := t.idx.Load()
	mask := p.mask
	i := h & mask
	for {
		s := p.slots[i].Load()
		if s != 0 && t.at(s&slotIndexMask-1) == e {
			break
		}
		i = (i + 1) & mask
	}
	t.free = append(t.free, p.slots[i].Load()&slotIndexMask-1)
	e.h = 0
	t.n--
	// Backward shift: move each later slot of the run into the hole unless
	// its home lies cyclically within (hole, slot].
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := p.slots[j].Load()
		if s == 0 {
			break
		}
		home := t.at(s&slotIndexMask-1).h & mask
		if (j-home)&mask >= (j-i)&mask {
			p.slots[i].Store(s)
			i = j
		}
	}
	p.slots[i].Store(0)
}

// Each calls f for every live Entry, in index order from start (wrapping),
// until f returns false. f may delete the Entry it is given. The caller
// holds the shard's lock; the entries are not locked.
func (t *Table) Each(start uint32, f func(e *Entry) bool) {
	if t.top == 0 {
		return
	}
	start %= t.top
	for k := uint32(0); k < t.top; k++ {
		idx := start + k
		if idx >= t.top {
			idx -= t.top
		}
		if e := t.at(idx); e.h != 0 && !f(e) {
			return
		}
	}
}

// An entry's lock and its place in its shard's LRU order share one word,
// entry.lk: bit 0 is the lock, the other 31 bits the shard's insertion
// epoch at the entry's latest use (memShard.epoch).
const epochMask = 1<<31 - 1

// Lock takes e's lock: a spin lock, held for one decision at most, that
// yields the processor while it waits.
func (e *Entry) Lock() {
	if v := e.lk.Load(); v&1 == 0 && e.lk.CompareAndSwap(v, v|1) {
		return
	}
	e.lockSlow()
}

func (e *Entry) lockSlow() {
	for i := 0; ; i++ {
		if v := e.lk.Load(); v&1 == 0 && e.lk.CompareAndSwap(v, v|1) {
			return
		}
		if i >= 8 {
			runtime.Gosched()
		}
	}
}

// Unlock releases e's lock, leaving its LRU place as it was.
func (e *Entry) Unlock() { e.lk.Store(e.lk.Load() &^ 1) }

// Release releases e's lock after a use at the shard's epoch: the entry
// becomes as recent as any in its shard.
func (e *Entry) Release(epoch uint32) { e.lk.Store(epoch << 1) }

// used returns the epoch of e's latest use; the caller holds e's lock.
func (e *Entry) used() uint32 { return e.lk.Load() >> 1 }
