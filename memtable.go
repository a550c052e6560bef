package llmrate

// entryTable maps a 64-bit hash to an entry, compactly: an open-addressing
// index of 4-byte slots (linear probing, at most 3/4 full) over entries kept
// in fixed-size chunks, so an entry costs its own 56 bytes plus 5 to 11
// bytes of index, where a Go map of pointers costs 24 to 38 more. Entries
// never move (their addresses stay valid while the shard is locked); a
// deleted entry's place is reused.
//
// A slot is 0 (empty) or tag<<24 | (index+1): the low 24 bits locate the
// entry, the top 8 hold hash bits that rule out most mismatches without
// touching the entry. A table holds at most maxTableEntries entries.
type entryTable struct {
	slots  []uint32
	chunks [][]entry
	free   []uint32 // indexes of deleted entries, for reuse
	n      int      // live entries
	top    uint32   // indexes handed out so far
}

const (
	chunkBits       = 6
	chunkSize       = 1 << chunkBits
	slotIndexBits   = 24
	slotIndexMask   = 1<<slotIndexBits - 1
	maxTableEntries = slotIndexMask - 1
	minTableSlots   = 16
)

// tableHash maps a hash to the one stored: 0 marks a deleted entry, so a
// hash of 0 is stored as 1 (a collision of probability 2^-64, as any).
func tableHash(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

func slotTag(h uint64) uint32 { return uint32(h>>48) & 0xFF << slotIndexBits }

func (t *entryTable) at(idx uint32) *entry {
	return &t.chunks[idx>>chunkBits][idx&(chunkSize-1)]
}

// get returns the entry for h, or nil.
func (t *entryTable) get(h uint64) *entry {
	if t.n == 0 {
		return nil
	}
	h = tableHash(h)
	mask := uint64(len(t.slots) - 1)
	tag := slotTag(h)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
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

// insert adds a zero entry for h, which must be absent, and returns it. The
// caller keeps the table under maxTableEntries.
func (t *entryTable) insert(h uint64) *entry {
	h = tableHash(h)
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	var idx uint32
	if k := len(t.free); k > 0 {
		idx, t.free = t.free[k-1], t.free[:k-1]
	} else {
		idx = t.top
		t.top++
		if int(idx>>chunkBits) == len(t.chunks) {
			t.chunks = append(t.chunks, make([]entry, chunkSize))
		}
	}
	e := t.at(idx)
	*e = entry{h: h}
	t.place(h, slotTag(h)|(idx+1))
	t.n++
	return e
}

// place puts slot s in the first empty slot from h's home.
func (t *entryTable) place(h uint64, s uint32) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *entryTable) grow() {
	old := t.slots
	t.slots = make([]uint32, max(minTableSlots, 2*len(old)))
	for _, s := range old {
		if s != 0 {
			t.place(t.at(s&slotIndexMask-1).h, s)
		}
	}
}

// delete removes e, which must be in the table. Later slots of its probe
// run shift back (no tombstones), so lookups stay short.
func (t *entryTable) delete(e *entry) {
	h := e.h
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for {
		s := t.slots[i]
		if s != 0 && t.at(s&slotIndexMask-1) == e {
			break
		}
		i = (i + 1) & mask
	}
	t.free = append(t.free, t.slots[i]&slotIndexMask-1)
	e.h = 0
	t.n--
	// Backward shift: move each later slot of the run into the hole unless
	// its home lies cyclically within (hole, slot].
	for j := (i + 1) & mask; t.slots[j] != 0; j = (j + 1) & mask {
		home := t.at(t.slots[j]&slotIndexMask-1).h & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = 0
}

// each calls f for every live entry, in index order from start (wrapping),
// until f returns false. f may delete the entry it is given.
func (t *entryTable) each(start uint32, f func(e *entry) bool) {
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
