package memstore

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

const (
	Shards   = 128 // a power of two, at most 128: shardIndex uses the top 7 bits
	minSweep = 64  // a shard smaller than this is never swept
	// An idle entry whose buckets are not in debt is certainly full (and
	// dropped without loss) after fullIdleSeconds under the figures it was
	// last used with: capacity is 2 minutes of refill. An entry in debt
	// records the exact time instead (Entry.Settle).
	fullIdleSeconds = 120
	// Candidates visited to choose a victim at the WithMaxKeys bound: up to
	// evictSample entries not in debt, among at most evictVisit entries.
	evictSample = 8
	evictVisit  = 64
)

// Shard is one of the store's 128 shards of a class (keys, workspaces):
// its table of entries, its gauges, window sets and quota sets, under Mu
// (see shardState for the lock order).
type Shard struct {
	shardState
	_ [64 - unsafe.Sizeof(shardState{})%64]byte // keep shards on separate cache lines
}

// The memory store's locks, in the order in which they are taken:
//
//  1. a key shard's mu, then
//  2. a workspace shard's mu (held by writers: insert, delete, sweep,
//     makeRoom; and by gauges and their held slots, IDs' paths, Levels,
//     Len);
//  3. a key entry's lock, then
//  4. a workspace entry's lock.
//
// A decision on known entries (admit and reconcile without gauges or IDs)
// takes only 3 and 4: it finds its entries without the shards' locks
// (Table.lookup), holding at most one entry of each class at a time.
// When one is missing it releases what it holds and starts again from 1
// (the locked path, which creates the entry). Every entry field is read
// and written under the entry's lock, whatever else is held.
//
// No deadlock: a goroutine waits for a lock only while holding none later
// in the order, with one exception. A writer holding a shard's mu may wait
// for an entry of that shard's table while holding others of it (makeRoom
// keeps its two candidates locked while it visits more). Any other holder
// of an entry of that table is then a decision (the rest need the mu),
// which, holding it, waits only for an entry of a later class, whose
// holder in turn waits only for one of a later class still, or for
// nothing: so the writer's wait ends.
//
// An entry is deleted only under both its shard's mu and its own lock, so
// a locked entry that still holds its hash is that hash's entry.
type shardState struct {
	Mu sync.Mutex
	t  Table
	// epoch counts the shard's insertions: the LRU order. A use records it
	// in the entry (entry.lk); entries used between two insertions are
	// equally recent. Written under mu, read without (a read-only line for
	// decisions on known keys, where a counter per use would be written by
	// every decision).
	epoch   atomic.Uint32
	sweepAt int
	// Gauges (Limits.ConcurrentRequests), apart from the entries: a gauge
	// is never swept or Evicted while a slot is held, and costs nothing to
	// a store without gauges. inFlight counts the slots held per gauge, by
	// the hash of its entry (absent: none held); held records, by admission
	// ID, the slots an admission took from this shard's key gauge and from
	// its workspace's (kept in the key's shard, or the workspace's for a
	// Solo request). Both are bounded by the requests in flight.
	inFlight map[uint64]int64
	held     map[string]HeldSlots
	// Windows (Limits.Windows; winset.go), apart from the entries too:
	// each entry hash's window buckets, bounded as the entries are.
	wins       map[uint64]*WinSet
	winSweepAt int
	// Calendar and session windows (quotaset.go): each entry hash's, kept
	// while a period or session in force holds anything.
	quotas       map[uint64]*QuotaSet
	quotaSweepAt int
}

// HeldSlots is what one admission took: a slot of the key gauge (its hash
// in the key's shard, or in the workspace's for a Solo request) and of the
// workspace gauge, when the have flags say so.
type HeldSlots struct {
	Key, WS         uint64
	HaveKey, HaveWS bool
	// The plan's gauges lent to a model entry's request (the root's
	// memquota.go), in the default buckets' shards.
	KP, WP         uint64
	HaveKP, HaveWP bool
}

// Take records one slot of gauge h in sh.
func (sh *Shard) Take(h uint64) {
	if sh.inFlight == nil {
		sh.inFlight = make(map[uint64]int64)
	}
	sh.inFlight[h]++
}

// Give returns one slot of gauge h in sh.
func (sh *Shard) Give(h uint64) {
	if n := sh.inFlight[h] - 1; n > 0 {
		sh.inFlight[h] = n
	} else {
		delete(sh.inFlight, h)
	}
}

// Hold records the slots admission id took, in its holder's shard.
func (sh *Shard) Hold(id string, hs HeldSlots) {
	if sh.held == nil {
		sh.held = make(map[string]HeldSlots)
	}
	sh.held[id] = hs
}

// Unhold forgets and returns the slots admission id holds; ok is false when
// it holds none (never took any, or released them already).
func (sh *Shard) Unhold(id string) (hs HeldSlots, ok bool) {
	if id == "" || len(sh.held) == 0 {
		return HeldSlots{}, false
	}
	if hs, ok = sh.held[id]; ok {
		delete(sh.held, id)
	}
	return hs, ok
}

// InFlight returns the slots held of gauge h in sh. The caller holds sh.Mu.
func (sh *Shard) InFlight(h uint64) int64 { return sh.inFlight[h] }

// Holds reports whether admission id holds slots recorded in sh. The
// caller holds sh.Mu.
func (sh *Shard) Holds(id string) bool {
	_, ok := sh.held[id]
	return ok
}

// Epoch returns the shard's insertion epoch, which Entry.Release records
// as an entry's latest use.
func (sh *Shard) Epoch() uint32 { return sh.epoch.Load() }
