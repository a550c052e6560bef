package llmrate

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/llmrate/llmrate/internal/calendar"
)

// DefaultMaxKeys is the memory store's default bound on tracked entries, per
// kind (key entries and workspace entries are bounded separately). An entry
// costs about 73 bytes with its index (BENCHMARKS.md), so the bound caps
// the store near 77 MB in the default configuration (one entry per key) and
// near 154 MB with separate workspaces (two kinds at the bound), beyond
// which only entries in debt are kept (see MemoryStore, OverBound). With
// windows (Limits.Windows) a key costs 200 to 792 bytes, 2.8 to 11 times
// as much: near 210 to 830 MB at the bound (bench/memory-windows.txt).
// Windows that hold spend (rolling, calendar or session) are never
// evicted: past the bound they are kept beyond it, as debts are, so a
// flood of made-up keys that each spend once holds about 93 bytes per key
// per rolling window and 109 per calendar window
// (bench/quota-flood-memory.txt) until their windows refill or their
// periods end (a day for a daily window, a month for a monthly one).
const DefaultMaxKeys = 1 << 20

const (
	memShards = 128 // a power of two, at most 128: shardIndex uses the top 7 bits
	minSweep  = 64  // a shard smaller than this is never swept
	// An idle entry whose buckets are not in debt is certainly full (and
	// dropped without loss) after fullIdleSeconds under the figures it was
	// last used with: capacity is 2 minutes of refill. An entry in debt
	// records the exact time instead (entry.settle).
	fullIdleSeconds = 120
	// Candidates visited to choose a victim at the WithMaxKeys bound: up to
	// evictSample entries not in debt, among at most evictVisit entries.
	evictSample = 8
	evictVisit  = 64
)

// MemoryStore is the default Store: per-process buckets in a sharded map,
// a lock per entry. Deciding on a known key allocates nothing and takes no
// shard-wide lock: decisions on different keys write no shared memory, so
// they scale with cores (BENCHMARKS.md).
//
// It keeps no raw key: entries are indexed by a per-store seeded 64-bit hash
// of the key and workspace (two distinct keys share buckets only on a hash
// collision, about 3e-8 for a million active keys, and an attacker cannot aim
// for one without the seed).
//
// Memory tracks active keys only: an entry is dropped once time alone would
// have refilled it to full under the figures of its latest admission or
// reconcile (refused admissions included), which loses nothing (it comes
// back full). If a key flood fills the store to its bound (WithMaxKeys) with
// entries that are not yet full, the least recently used of a small sample
// of entries not in debt is dropped to make room: that key's next request
// then finds a full bucket. Recency is counted in entries added to the
// shard (one of 128): entries last used between the same two additions are
// equally recent, and the first of them sampled goes. Such lossy evictions
// are counted (Evictions) and reported to the observer of every limiter
// using the store (NotifyEvictions).
//
// A debt is never forgotten: an entry in debt (a bucket below zero after its
// latest admission or reconcile) is dropped only once time alone has
// refilled it. When every candidate for eviction is in debt, the store adds
// the new entry beyond its bound instead (counted by OverBound); the excess
// goes as the debts refill. The only exception is a shard's hard limit of
// 16,777,214 entries (about 2.1 billion in the store), where the least
// recently used entry is dropped whatever it owes (a lossy eviction).
//
// An entry that only copies what another store reported (Follow), nothing
// spent here since, is dropped first when room is needed, in debt or not,
// and without counting: that store holds it.
//
// Windows (Limits.Windows) are kept per key, and per workspace, apart from
// the entries: a key's windows are dropped once time alone has refilled
// them (a daily window: up to a day after its last use), and a calendar
// or session window once its period (or session) holding spend has ended.
// A window holding spend is never evicted, in debt or not: a window spent
// to 0 is a quota held against its key, and dropping it would give the
// quota back (a key flood must not refund a day). At the WithMaxKeys bound
// the store keeps them beyond it instead (counted in OverBound); the excess
// goes as the windows refill and the periods end. A limiter without
// windows never creates any.
type MemoryStore struct {
	seed     maphash.Seed
	perShard int
	keys     [memShards]memShard // key entries, by pair hash (pairHash)
	ws       [memShards]memShard // workspace entries, by workspace hash
	lossy    atomic.Int64
	over     atomic.Int64
	evict    evictNotifier
	maxTotal int
	err      error                   // an invalid option, reported by Err
	ids      atomic.Pointer[idTable] // identities seen (memidentity.go); nil until one is
	cal      calendar.Cache          // calendar windows' periods (memquota.go)
}

// entry holds the two buckets of one key (within its workspace) or of one
// workspace. last is the latest clock reading seen: refill is computed from
// it and a clock that moves backwards refills nothing.
//
// lk is the entry's lock (bit 0) and its place in the LRU order (the other
// bits: the shard's epoch at its latest use, see shardState.epoch): one
// 4-byte word for both keeps an entry at 56 bytes. Every field
// but lk is read and written under the entry's lock; h is written under
// the shard's lock too, so a writer holding the shard's lock may read any
// entry's h without the entry's.
type entry struct {
	h    uint64 // the entry's hash in its table; 0 once deleted
	last int64
	req  bucket
	tok  bucket
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

func boolBit(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

type memShard struct {
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
// (entryTable.lookup), holding at most one entry of each class at a time.
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
	mu sync.Mutex
	t  entryTable
	// epoch counts the shard's insertions: the LRU order. A use records it
	// in the entry (entry.lk); entries used between two insertions are
	// equally recent. Written under mu, read without (a read-only line for
	// decisions on known keys, where a counter per use would be written by
	// every decision).
	epoch   atomic.Uint32
	sweepAt int
	// Gauges (Limits.ConcurrentRequests), apart from the entries: a gauge
	// is never swept or evicted while a slot is held, and costs nothing to
	// a store without gauges. inFlight counts the slots held per gauge, by
	// the hash of its entry (absent: none held); held records, by admission
	// ID, the slots an admission took from this shard's key gauge and from
	// its workspace's (kept in the key's shard, or the workspace's for a
	// Solo request). Both are bounded by the requests in flight.
	inFlight map[uint64]int64
	held     map[string]heldSlots
	// Windows (Limits.Windows; memwindow.go), apart from the entries too:
	// each entry hash's window buckets, bounded as the entries are.
	wins       map[uint64]*winSet
	winSweepAt int
	// Calendar and session windows (memquota.go): each entry hash's, kept
	// while a period or session in force holds anything.
	quotas       map[uint64]*quotaSet
	quotaSweepAt int
}

// heldSlots is what one admission took: a slot of the key gauge (its hash
// in the key's shard, or in the workspace's for a Solo request) and of the
// workspace gauge, when the have flags say so.
type heldSlots struct {
	key, ws         uint64
	haveKey, haveWS bool
	// The plan's gauges lent to a model entry's request (memquota.go), in
	// the default buckets' shards.
	kp, wp         uint64
	haveKP, haveWP bool
}

// gaugeCheck is what decide needs to know of the gauges in force: each
// figure (0: no cap) and the slots held now; with a priority reserve
// (AdmitRequest.Reserve), the slots each gauge keeps free for other
// traffic (its floor; set by decideStages' callers through withReserve).
type gaugeCheck struct {
	keyCap, keyNow, wsCap, wsNow int64
	keyFloor, wsFloor            int64
}

// full returns the first gauge without a free slot above its floor.
func (g *gaugeCheck) full() (Bucket, bool) {
	switch {
	case g.keyCap > 0 && g.keyNow+g.keyFloor >= g.keyCap:
		return KeyConcurrent, true
	case g.wsCap > 0 && g.wsNow+g.wsFloor >= g.wsCap:
		return WorkspaceConcurrent, true
	}
	return 0, false
}

// byReserve reports whether gauge b, which full named, has a free slot all
// the same: only its floor kept the request out.
func (g *gaugeCheck) byReserve(b Bucket) bool {
	if b == KeyConcurrent {
		return g.keyNow < g.keyCap
	}
	return g.wsNow < g.wsCap
}

// withReserve sets the gauges' floors, if g is not nil, for a reserve of r
// millionths (above MaxReserve: MaxReserve): ⌈r × figure⌉ slots kept free
// after the request takes its own.
func (g *gaugeCheck) withReserve(r int64) {
	if g != nil {
		g.keyFloor, g.wsFloor = ReserveFloor(r, g.keyCap), ReserveFloor(r, g.wsCap)
	}
}

// take records one slot of gauge h in sh.
func (sh *memShard) take(h uint64) {
	if sh.inFlight == nil {
		sh.inFlight = make(map[uint64]int64)
	}
	sh.inFlight[h]++
}

// give returns one slot of gauge h in sh.
func (sh *memShard) give(h uint64) {
	if n := sh.inFlight[h] - 1; n > 0 {
		sh.inFlight[h] = n
	} else {
		delete(sh.inFlight, h)
	}
}

// hold records the slots admission id took, in its holder's shard.
func (sh *memShard) hold(id string, hs heldSlots) {
	if sh.held == nil {
		sh.held = make(map[string]heldSlots)
	}
	sh.held[id] = hs
}

// unhold forgets and returns the slots admission id holds; ok is false when
// it holds none (never took any, or released them already).
func (sh *memShard) unhold(id string) (hs heldSlots, ok bool) {
	if id == "" || len(sh.held) == 0 {
		return heldSlots{}, false
	}
	if hs, ok = sh.held[id]; ok {
		delete(sh.held, id)
	}
	return hs, ok
}

// MemoryOption configures a MemoryStore. Options only record values;
// NewMemoryStore validates them (see Err).
type MemoryOption interface{ applyMemory(*memoryConfig) }

type memoryConfig struct {
	maxKeys int
	errs    []error
}

type memoryOptionFunc func(*memoryConfig)

func (f memoryOptionFunc) applyMemory(c *memoryConfig) { f(c) }

// WithMaxKeys bounds the number of key entries, and separately of workspace
// entries, the store tracks. Default: DefaultMaxKeys. n must be positive.
// Entries in debt are never dropped to keep the bound: when every
// candidate for eviction is in debt, the store goes beyond it (counted by
// OverBound) and comes back as the debts refill. Windows holding spend
// (Limits.Windows: rolling, calendar or session) are kept so too, never
// evicted: a key flood never gives back a spent quota, and costs the
// memory DefaultMaxKeys states per flooding key for as long as its windows
// hold spend.
// The bound is split evenly over the store's 128 shards (rounded down, at
// least one entry and at most 16,777,214 per shard: about 2.1 billion in
// all).
func WithMaxKeys(n int) MemoryOption {
	return memoryOptionFunc(func(c *memoryConfig) {
		if n <= 0 {
			c.errs = append(c.errs, &ConfigError{Option: "WithMaxKeys", Err: fmt.Errorf("%d entries: must be positive", n)})
			return
		}
		c.maxKeys = n
	})
}

// NewMemoryStore returns an empty in-memory store. It cannot return an
// error: an invalid option is kept and reported by Err, New refuses the
// store (WithStore) with that *ConfigError, and until then the store runs
// with the option's default.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	c := memoryConfig{maxKeys: DefaultMaxKeys}
	nils := 0
	for _, o := range opts {
		if o == nil {
			nils++
			continue
		}
		o.applyMemory(&c)
	}
	if nils > 0 {
		c.errs = append(c.errs, &ConfigError{Option: "MemoryOption", Err: errors.New("nil option")})
	}
	s := &MemoryStore{seed: maphash.MakeSeed(), maxTotal: c.maxKeys, err: errors.Join(c.errs...)}
	// Never above WithMaxKeys (from 128 on), nor above what a table holds.
	s.perShard = min(max(1, s.maxTotal/memShards), maxTableEntries)
	for i := range s.keys {
		s.keys[i].sweepAt = minSweep
		s.ws[i].sweepAt = minSweep
	}
	return s
}

// Err returns the store's invalid options as *ConfigErrors (joined when
// several), or nil when every option was valid.
func (s *MemoryStore) Err() error { return s.err }

// NotifyEvictions implements EvictionNotifier.
func (s *MemoryStore) NotifyEvictions(o Observer) (stop func()) { return s.evict.add(o) }

var _ Store = (*MemoryStore)(nil)

// Evictions returns how many entries were dropped before they were full
// because the store was at its WithMaxKeys bound.
func (s *MemoryStore) Evictions() int64 { return s.lossy.Load() }

// OverBound returns how many entries were added beyond the WithMaxKeys
// bound because every candidate for eviction was in debt: the store keeps
// a debt rather than forget it, and goes back to its bound as the debts
// refill.
func (s *MemoryStore) OverBound() int64 { return s.over.Load() }

// Len returns the number of key entries and workspace entries held.
func (s *MemoryStore) Len() (keys, workspaces int) {
	for i := range s.keys {
		s.keys[i].mu.Lock()
		keys += s.keys[i].t.n
		s.keys[i].mu.Unlock()
		s.ws[i].mu.Lock()
		workspaces += s.ws[i].t.n
		s.ws[i].mu.Unlock()
	}
	return keys, workspaces
}

// hashes returns the pair hash that indexes the key's entry within its
// workspace, and the workspace hash, both for the buckets of model (a
// ModelLimits entry; "" for the default buckets).
func (s *MemoryStore) hashes(key, workspace, model string) (pk, wh uint64) {
	w0 := maphash.String(s.seed, workspace)
	kh := w0
	if key != workspace {
		kh = maphash.String(s.seed, key)
	}
	wh = s.withModel(w0, model)
	return pairHash(kh, wh), wh
}

// workspaceHash indexes the workspace's buckets of model ("" for the
// default buckets).
func (s *MemoryStore) workspaceHash(workspace, model string) uint64 {
	return s.withModel(maphash.String(s.seed, workspace), model)
}

// withModel turns a workspace hash into the hash of that workspace's
// buckets of model: the default buckets ("") keep the workspace's own hash,
// a model entry's combine it with the entry's. For a fixed model the
// combination is a bijection of the workspace hash, so two (workspace,
// model) pairs share an entry only when seeded 64-bit hashes collide, as two
// workspaces do. A key's entries follow: they are indexed by the pair hash
// of the key and this hash.
func (s *MemoryStore) withModel(wh uint64, model string) uint64 {
	if model == "" {
		return wh
	}
	return wh ^ bits.RotateLeft64(maphash.String(s.seed, model)*0xC2B2AE3D27D4EB4F, 23)
}

// pairHash combines a key hash and a workspace hash into one 64-bit index.
// For a fixed workspace it is a bijection of the key hash (and the other way
// round), so two pairs share an entry only when their seeded hashes collide
// on 64 bits, as two workspaces do. A single word keeps the map on its fast
// uint64 path and its slots at 8 bytes.
func pairHash(kh, wh uint64) uint64 {
	return kh ^ bits.RotateLeft64(wh*0x9E3779B97F4A7C15, 31)
}

func (s *MemoryStore) shards(pk, wh uint64) (*memShard, *memShard) {
	return &s.keys[shardIndex(pk)], &s.ws[shardIndex(wh)]
}

// shardIndex picks a shard by a hash's top bits (the low bits place the
// entry within the shard's table).
func shardIndex(h uint64) uint64 { return h >> 57 & (memShards - 1) }

// lock locks the key shard, then the workspace shard, then the key's
// entry, then the workspace's (the order shardState describes), and
// returns both shards and entries locked, the entries created full if
// absent and advanced to now. The caller releases the entries
// (releasePair) and then the shards.
func (s *MemoryStore) lock(key, workspace, model string, kl, wl *Limits, now int64) (ks, wsh *memShard, ke, we *entry, ev evicted) {
	pk, wh := s.hashes(key, workspace, model)
	return s.lockHashed(pk, wh, kl, wl, now)
}

// lockHashed is lock for the entries' hashes.
func (s *MemoryStore) lockHashed(pk, wh uint64, kl, wl *Limits, now int64) (ks, wsh *memShard, ke, we *entry, ev evicted) {
	ks, wsh = s.shards(pk, wh)
	ks.mu.Lock()
	wsh.mu.Lock()
	ke = getEntry(ks, s.perShard, pk, kl, now, &ev)
	we = getEntry(wsh, s.perShard, wh, wl, now, &ev)
	ke.advance(now, kl)
	we.advance(now, wl)
	we.mark.setSolo(false)
	return ks, wsh, ke, we, ev
}

// pair returns the key's entry and the workspace's, both locked (and
// nothing else), created full if absent and advanced to now: found without
// the shards' locks when both are there, else by lock. The caller releases
// the entries.
func (s *MemoryStore) pair(key, workspace, model string, kl, wl *Limits, now int64) (ks, wsh *memShard, ke, we *entry, ev evicted) {
	pk, wh := s.hashes(key, workspace, model)
	ks, wsh = s.shards(pk, wh)
	if ke = ks.t.lookup(pk); ke != nil {
		if we = wsh.t.lookup(wh); we != nil {
			ke.advance(now, kl)
			we.advance(now, wl)
			we.mark.setSolo(false)
			return ks, wsh, ke, we, ev
		}
		ke.unlock() // the locked path takes the shards' locks first
	}
	ks, wsh, ke, we, ev = s.lockHashed(pk, wh, kl, wl, now)
	wsh.mu.Unlock()
	ks.mu.Unlock()
	return ks, wsh, ke, we, ev
}

// releasePair releases the entries of pair or lock, as used now.
func releasePair(ks, wsh *memShard, ke, we *entry) {
	we.release(wsh.epoch.Load())
	ke.release(ks.epoch.Load())
}

// evicted counts, for one store call, the lossy evictions and the entries
// added beyond the bound that making room for its entries took.
type evicted struct{ lossy, over int32 }

// noteEvictions counts ev in the store (Evictions, OverBound) and tells the
// observers of the lossy evictions.
func (s *MemoryStore) noteEvictions(ev evicted) {
	if ev.over > 0 {
		s.over.Add(int64(ev.over))
	}
	if ev.lossy > 0 {
		s.lossy.Add(int64(ev.lossy))
		s.evict.notify(int(ev.lossy))
	}
}

// solo returns the one entry of a Solo request (kept in the workspace map),
// created full if absent and advanced to now, with its shard: both locked.
// The caller releases the entry, then the shard.
func (s *MemoryStore) solo(workspace, model string, lim *Limits, now int64) (sh *memShard, e *entry, ev evicted) {
	return s.soloHashed(s.workspaceHash(workspace, model), lim, now)
}

// soloHashed is solo for the entry's hash.
func (s *MemoryStore) soloHashed(wh uint64, lim *Limits, now int64) (sh *memShard, e *entry, ev evicted) {
	sh = &s.ws[shardIndex(wh)]
	sh.mu.Lock()
	e = getEntry(sh, s.perShard, wh, lim, now, &ev)
	e.advance(now, lim)
	e.mark.setSolo(true)
	return sh, e, ev
}

// soloEntry is solo holding only the entry's lock: found without the
// shard's lock when it is there, else by lock. The caller releases the
// entry.
func (s *MemoryStore) soloEntry(workspace, model string, lim *Limits, now int64) (sh *memShard, e *entry, ev evicted) {
	wh := s.workspaceHash(workspace, model)
	sh = &s.ws[shardIndex(wh)]
	if e = sh.t.lookup(wh); e == nil {
		sh, e, ev = s.soloHashed(wh, lim, now)
		sh.mu.Unlock()
		return sh, e, ev
	}
	e.advance(now, lim)
	e.mark.setSolo(true)
	return sh, e, ev
}

// ErrNoAdmissionID is the error of an admission under a gauge
// (Limits.ConcurrentRequests > 0) without an AdmitRequest.ID: its slots
// could never be released. The limiter always sets one.
var ErrNoAdmissionID = errors.New("llmrate: an admission under a concurrency limit needs an ID")

// errHeldID is the error of an admission whose ID already holds slots.
var errHeldID = errors.New("llmrate: this admission ID already holds concurrency slots")

// Admit implements Store (and QuotaStore: see memquota.go). An admission
// with an ID already admitted (within five seconds of its clock) gets that
// first decision and debits nothing.
// Gauges and reservations are described on Store and AdmitRequest.MaxWait;
// a slot is released by the admission's Reconcile. A priority reserve
// (AdmitRequest.Reserve) above MaxReserve is decided as MaxReserve.
func (s *MemoryStore) Admit(_ context.Context, r AdmitRequest) (Decision, error) {
	if r.ID != "" {
		return s.admitOnce(r)
	}
	if windowed(r.KeyLimits, r.WorkspaceLimits) {
		if mayQuota(&r) || hasQuota(r.KeyLimits.Windows) || hasQuota(r.WorkspaceLimits.Windows) {
			return s.admitQuota(r)
		}
		return s.admitWindowed(r, nil) // an ID under a gauge: ErrNoAdmissionID
	}
	if plain(&r) {
		return s.admit(&r), nil
	}
	if mayQuota(&r) {
		return s.admitQuota(r)
	}
	if r.KeyLimits.ConcurrentRequests > 0 || r.WorkspaceLimits.ConcurrentRequests > 0 {
		return Decision{}, ErrNoAdmissionID
	}
	if r.Reserve > 0 {
		return s.admitReserved(r)
	}
	return s.admit(&r), nil
}

// admitAny is admit, or admitWindowed with windows, or admitReserved with
// a priority reserve (AdmitRequest.Reserve: its floors are decided as a
// window's stages are), or admitGauged under a gauge.
func (s *MemoryStore) admitAny(r *AdmitRequest) (Decision, error) {
	if windowed(r.KeyLimits, r.WorkspaceLimits) {
		if mayQuota(r) || hasQuota(r.KeyLimits.Windows) || hasQuota(r.WorkspaceLimits.Windows) {
			return s.admitQuota(*r)
		}
		return s.admitWindowed(*r, nil)
	}
	if plain(r) {
		return s.admit(r), nil
	}
	if mayQuota(r) {
		return s.admitQuota(*r)
	}
	if r.Reserve > 0 {
		return s.admitReserved(*r)
	}
	if r.KeyLimits.ConcurrentRequests > 0 || r.WorkspaceLimits.ConcurrentRequests > 0 {
		return s.admitGauged(*r)
	}
	return s.admit(r), nil
}

// plain reports, for a request without windows, that it has no gauge, no
// reserve and no quota (mayQuota): admit decides it. One test of a few
// words' bits, so that the commonest admission pays no more for the
// features it does not use.
func plain(r *AdmitRequest) bool {
	return r.KeyLimits.ConcurrentRequests|r.WorkspaceLimits.ConcurrentRequests|r.Reserve == 0 &&
		r.KeyPlan == nil && r.WorkspacePlan == nil &&
		r.KeyLimits.RequestsPerMinute|r.KeyLimits.TokensPerMinute|r.WorkspaceLimits.RequestsPerMinute|r.WorkspaceLimits.TokensPerMinute >= 0
}

func (s *MemoryStore) admit(r *AdmitRequest) Decision {
	now := r.Now.UnixNano()
	if r.Solo {
		sh, e, ev := s.soloEntry(r.Workspace, r.Model, &r.WorkspaceLimits, now)
		d := decideSolo(e, &r.WorkspaceLimits, r.Tokens, r.MaxWait, nil)
		e.settle(&r.WorkspaceLimits)
		e.release(sh.epoch.Load())
		s.noteEvictions(ev)
		return d
	}
	ks, wsh, ke, we, ev := s.pair(r.Key, r.Workspace, r.Model, &r.KeyLimits, &r.WorkspaceLimits, now)
	d := decide(&ke.req, &ke.tok, &we.req, &we.tok, &r.KeyLimits, &r.WorkspaceLimits, r.Tokens, r.MaxWait, nil)
	ke.settle(&r.KeyLimits)
	we.settle(&r.WorkspaceLimits)
	releasePair(ks, wsh, ke, we)
	s.noteEvictions(ev)
	return d
}

// admitGauged is Admit under a gauge: the admission also takes a slot of
// each gauge in force, recorded under its ID in the shard that keeps the
// key's gauge (the workspace's for a Solo request). Kept apart so that an
// admission without gauges costs what it did before gauges existed.
func (s *MemoryStore) admitGauged(r AdmitRequest) (Decision, error) {
	now := r.Now.UnixNano()
	if r.Solo {
		wh := s.workspaceHash(r.Workspace, r.Model)
		sh, e, ev := s.solo(r.Workspace, r.Model, &r.WorkspaceLimits, now)
		if _, dup := sh.held[r.ID]; dup {
			e.release(sh.epoch.Load())
			sh.mu.Unlock()
			return Decision{}, errHeldID
		}
		g := gaugeCheck{keyCap: r.WorkspaceLimits.ConcurrentRequests, keyNow: sh.inFlight[wh]}
		d := decideSolo(e, &r.WorkspaceLimits, r.Tokens, r.MaxWait, &g)
		if d.Allowed {
			sh.take(wh)
			sh.hold(r.ID, heldSlots{key: wh, haveKey: true})
		}
		e.settle(&r.WorkspaceLimits)
		e.release(sh.epoch.Load())
		sh.mu.Unlock()
		s.noteEvictions(ev)
		return d, nil
	}
	kc, wc := max(0, r.KeyLimits.ConcurrentRequests), max(0, r.WorkspaceLimits.ConcurrentRequests)
	pk, wh := s.hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.lock(r.Key, r.Workspace, r.Model, &r.KeyLimits, &r.WorkspaceLimits, now)
	if _, dup := ks.held[r.ID]; dup {
		releasePair(ks, wsh, ke, we)
		wsh.mu.Unlock()
		ks.mu.Unlock()
		s.noteEvictions(ev)
		return Decision{}, errHeldID
	}
	g := gaugeCheck{keyCap: kc, keyNow: ks.inFlight[pk], wsCap: wc, wsNow: wsh.inFlight[wh]}
	d := decide(&ke.req, &ke.tok, &we.req, &we.tok, &r.KeyLimits, &r.WorkspaceLimits, r.Tokens, r.MaxWait, &g)
	if d.Allowed {
		hs := heldSlots{key: pk, ws: wh, haveKey: kc > 0, haveWS: wc > 0}
		if hs.haveKey {
			ks.take(pk)
		}
		if hs.haveWS {
			wsh.take(wh)
		}
		ks.hold(r.ID, hs)
	}
	ke.settle(&r.KeyLimits)
	we.settle(&r.WorkspaceLimits)
	releasePair(ks, wsh, ke, we)
	wsh.mu.Unlock()
	ks.mu.Unlock()
	s.noteEvictions(ev)
	return d, nil
}

// Reconcile implements Store. A reconcile with an ID is applied at most
// once (within thirty seconds of its clock). It also releases the gauge
// slots that the admission with r.ID took, if it still holds any.
func (s *MemoryStore) Reconcile(_ context.Context, r ReconcileRequest) error {
	if r.ID != "" {
		s.reconcileOnce(r)
		return nil
	}
	s.reconcile(&r)
	return nil
}

func (s *MemoryStore) reconcile(r *ReconcileRequest) {
	if windowed(r.KeyLimits, r.WorkspaceLimits) {
		if mayQuotaReconcile(r) || hasQuota(r.KeyLimits.Windows) || hasQuota(r.WorkspaceLimits.Windows) {
			s.reconcileQuota(*r)
		} else {
			s.reconcileWindowed(*r)
		}
		return
	}
	if mayQuotaReconcile(r) {
		s.reconcileQuota(*r)
		return
	}
	now := r.Now.UnixNano()
	if r.ID == "" {
		// No gauge slots to release: the entries' locks are enough.
		if r.Solo {
			sh, e, ev := s.soloEntry(r.Workspace, r.Model, &r.WorkspaceLimits, now)
			reconcileEntry(e, r, WorkspaceTokens, r.WorkspaceLimits)
			e.settle(&r.WorkspaceLimits)
			e.release(sh.epoch.Load())
			s.noteEvictions(ev)
			return
		}
		ks, wsh, ke, we, ev := s.pair(r.Key, r.Workspace, r.Model, &r.KeyLimits, &r.WorkspaceLimits, now)
		reconcileEntry(ke, r, KeyTokens, r.KeyLimits)
		reconcileEntry(we, r, WorkspaceTokens, r.WorkspaceLimits)
		ke.settle(&r.KeyLimits)
		we.settle(&r.WorkspaceLimits)
		releasePair(ks, wsh, ke, we)
		s.noteEvictions(ev)
		return
	}
	if r.Solo {
		sh, e, ev := s.solo(r.Workspace, r.Model, &r.WorkspaceLimits, now)
		reconcileEntry(e, r, WorkspaceTokens, r.WorkspaceLimits)
		e.settle(&r.WorkspaceLimits)
		e.release(sh.epoch.Load())
		if hs, ok := sh.unhold(r.ID); ok {
			sh.give(hs.key)
		}
		sh.mu.Unlock()
		s.noteEvictions(ev)
		return
	}
	ks, wsh, ke, we, ev := s.lock(r.Key, r.Workspace, r.Model, &r.KeyLimits, &r.WorkspaceLimits, now)
	reconcileEntry(ke, r, KeyTokens, r.KeyLimits)
	reconcileEntry(we, r, WorkspaceTokens, r.WorkspaceLimits)
	ke.settle(&r.KeyLimits)
	we.settle(&r.WorkspaceLimits)
	releasePair(ks, wsh, ke, we)
	releaseSlots(ks, wsh, r.ID)
	wsh.mu.Unlock()
	ks.mu.Unlock()
	s.noteEvictions(ev)
}

// releaseSlots gives back the gauge slots admission id holds in the key's
// shard ks and the workspace's shard wsh (both locked by the caller), once:
// a later call finds nothing held.
func releaseSlots(ks, wsh *memShard, id string) {
	if hs, ok := ks.unhold(id); ok {
		if hs.haveKey {
			ks.give(hs.key)
		}
		if hs.haveWS {
			wsh.give(hs.ws)
		}
	}
}

// reconcileEntry applies r to one entry's buckets (tok names its tokens
// bucket, lim its figures): a refund credits one request and the estimate back; a
// reconcile adds the bounded actual charge less the estimate to the tokens
// bucket.
func reconcileEntry(e *entry, r *ReconcileRequest, tok Bucket, lim Limits) {
	if r.Refund {
		e.req.adjust(-1, 2*lim.RequestsPerMinute)
		e.tok.adjust(-r.Estimate, 2*lim.TokensPerMinute)
		return
	}
	e.tok.adjust(r.BoundedActual(tok)-r.Estimate, 2*lim.TokensPerMinute)
}

// decide checks the four buckets in admission order, then the gauges (g;
// nil: none in force), and debits all four buckets only if all have room
// and every gauge a free slot; the caller takes the slots. With maxWait > 0
// a request that lacks room only in buckets that would have it within
// maxWait is debited all the same (a reservation: Wait says how long). It
// is shared by every in-process implementation, so the arithmetic lives in
// one place.
func decide(kr, kt, wr, wt *bucket, kl, wl *Limits, n int64, maxWait time.Duration, g *gaugeCheck) Decision {
	var d Decision
	switch {
	case kr.level < 1:
		d.Refused = KeyRequests
	case kt.level < n:
		d.Refused = KeyTokens
	case wr.level < 1:
		d.Refused = WorkspaceRequests
	case wt.level < n:
		d.Refused = WorkspaceTokens
	default:
		if g != nil {
			if b, full := g.full(); full {
				d.Refused, d.RetryAfter = b, time.Second
				d.Remaining = [4]int64{kr.level, kt.level, wr.level, wt.level}
				return d
			}
		}
		kr.level--
		kt.level -= n
		wr.level--
		wt.level -= n
		d.Allowed = true
		d.Remaining = [4]int64{kr.level, kt.level, wr.level, wt.level}
		return d
	}
	d.Remaining = [4]int64{kr.level, kt.level, wr.level, wt.level}
	for i, b := range [4]*bucket{kr, kt, wr, wt} {
		need, rate := int64(1), Bucket(i).PerMinute(*kl, *wl)
		if Bucket(i).Tokens() {
			need = n
		}
		w, never := b.wait(need, rate, 2*rate, waitLimit)
		d.RetryAfter = max(d.RetryAfter, w)
		d.NeverFits = d.NeverFits || never
	}
	if reserve(&d, maxWait, g) {
		kr.level--
		kt.level -= n
		wr.level--
		wt.level -= n
		d.Remaining = [4]int64{kr.level, kt.level, wr.level, wt.level}
	}
	return d
}

// waitLimit bounds the waits decide computes: just past MaxRetryAfter, so
// that a wait longer than every MaxWait allowed is told from one of exactly
// MaxRetryAfter.
const waitLimit = MaxRetryAfter + 1

// reserve finishes a refusal whose d.RetryAfter is the exact time until the
// request fits every bucket (up to waitLimit): it turns it into a
// reservation, returning true (the caller debits), when that time is within
// maxWait and every gauge has a free slot; else it leaves d a refusal with
// RetryAfter clamped to MaxRetryAfter (at least a second when a gauge
// refused).
func reserve(d *Decision, maxWait time.Duration, g *gaugeCheck) bool {
	if maxWait <= 0 || d.NeverFits || d.RetryAfter > maxWait {
		d.RetryAfter = min(d.RetryAfter, MaxRetryAfter)
		return false
	}
	if g != nil {
		if b, full := g.full(); full {
			d.Refused, d.RetryAfter = b, max(d.RetryAfter, time.Second)
			return false
		}
	}
	d.Allowed, d.Refused, d.Wait, d.RetryAfter = true, 0, d.RetryAfter, 0
	return true
}

// decideSolo is decide for a Solo request: the key's buckets and the
// workspace's are the same two buckets, so the key stage decides; its one
// gauge is g's key gauge.
func decideSolo(e *entry, lim *Limits, n int64, maxWait time.Duration, g *gaugeCheck) Decision {
	var d Decision
	switch {
	case e.req.level < 1:
		d.Refused = KeyRequests
	case e.tok.level < n:
		d.Refused = KeyTokens
	default:
		if g != nil {
			if b, full := g.full(); full {
				d.Refused, d.RetryAfter = b, time.Second
				d.Remaining = [4]int64{e.req.level, e.tok.level, e.req.level, e.tok.level}
				return d
			}
		}
		e.req.level--
		e.tok.level -= n
		d.Allowed = true
		d.Remaining = [4]int64{e.req.level, e.tok.level, e.req.level, e.tok.level}
		return d
	}
	d.Remaining = [4]int64{e.req.level, e.tok.level, e.req.level, e.tok.level}
	w1, n1 := e.req.wait(1, lim.RequestsPerMinute, 2*lim.RequestsPerMinute, waitLimit)
	w2, n2 := e.tok.wait(n, lim.TokensPerMinute, 2*lim.TokensPerMinute, waitLimit)
	d.RetryAfter, d.NeverFits = max(w1, w2), n1 || n2
	if reserve(&d, maxWait, g) {
		e.req.level--
		e.tok.level -= n
		d.Remaining = [4]int64{e.req.level, e.tok.level, e.req.level, e.tok.level}
	}
	return d
}

// advance refills both buckets up to now under lim. A clock reading earlier
// than the latest seen refills nothing; the latest is kept.
func (e *entry) advance(now int64, lim *Limits) {
	dt := now - e.last
	if dt > 0 {
		e.last = now
	} else {
		dt = 0
	}
	e.req.refill(lim.RequestsPerMinute, 2*lim.RequestsPerMinute, dt)
	e.tok.refill(lim.TokensPerMinute, 2*lim.TokensPerMinute, dt)
}

// settle records, after an admission or reconcile under lim, when time
// alone will have refilled e to full under lim: within fullIdleSeconds
// when neither bucket is in debt (each is at most capacity, 2 minutes of
// refill, below full), else the exact time, rounded up to the second. An
// entry held to figures smaller than those of its debt may owe far longer
// than the 6 minutes a debt at its own figures takes (issue 18 item 9).
func (e *entry) settle(lim *Limits) {
	if e.req.level >= 0 && e.tok.level >= 0 {
		e.mark.setFullIn(fullIdleSeconds)
		return
	}
	e.mark.setFullIn(max(secondsToFull(e.req, lim.RequestsPerMinute), secondsToFull(e.tok, lim.TokensPerMinute)))
}

// secondsToFull is the time, in whole seconds rounded up, until time alone
// refills b to its capacity (2×rate) at rate units per minute; fullNever
// when that is beyond fullNever seconds or rate is not positive.
func secondsToFull(b bucket, rate int64) int64 {
	if rate <= 0 {
		return fullNever
	}
	const limit = time.Duration(fullNever) * time.Second
	d, _ := b.wait(2*rate, rate, 2*rate, limit)
	if d >= limit {
		return fullNever
	}
	return int64((d + time.Second - 1) / time.Second)
}

// idleFull reports whether time alone has certainly refilled e to full by
// now, under the figures of its latest admission or reconcile.
func (e *entry) idleFull(now int64) bool {
	in := e.mark.fullIn()
	return in < fullNever && now-e.last >= in*int64(time.Second)
}

// inDebt reports whether a bucket of e was below zero after its latest
// admission or reconcile: such an entry is dropped only once idleFull.
func (e *entry) inDebt() bool { return e.req.level < 0 || e.tok.level < 0 }

// fill makes e full as of now under lim.
func (e *entry) fill(now int64, lim *Limits) {
	e.last = now
	e.req = bucket{level: 2 * lim.RequestsPerMinute}
	e.tok = bucket{level: 2 * lim.TokensPerMinute}
	e.mark.setFullIn(0)
}

// getEntry returns the entry for k, locked, creating it full if absent. The
// caller holds sh.mu (and may hold a key entry, when sh is a workspace
// shard). Creating may first drop entries that time alone has refilled
// (lossless), and, at the bound, the least recently used of a sample of
// entries not in debt (lossy, added to ev.lossy). When the sample holds
// only debts, the entry is added beyond the bound (ev.over) unless the
// table is at its hard limit.
func getEntry(sh *memShard, bound int, k uint64, lim *Limits, now int64, ev *evicted) *entry {
	if e := sh.t.get(k); e != nil {
		e.lock()
		return e
	}
	sh.epoch.Add(1)
	if sh.t.n >= sh.sweepAt {
		// Amortised: drop every entry that time alone has refilled.
		sh.t.each(0, func(old *entry) bool {
			old.lock()
			if old.idleFull(now) {
				sh.t.delete(old)
			}
			old.unlock()
			return true
		})
		sh.sweepAt = max(minSweep, 2*sh.t.n)
	}
	if sh.t.n >= bound {
		makeRoom(sh, bound, now, ev)
	}
	e := sh.t.insert(k)
	e.fill(now, lim)
	return e
}

// makeRoom makes room for one entry in a shard at its bound; the caller
// holds sh.mu. Visiting entries from a random place, it drops those
// already full, and those only Follow set (lossless: the shared store
// holds them), until the shard is below its bound, else the
// least recently used of up to evictSample entries not in debt (lossy).
// Entries in debt are passed over: when only debts were found, the shard
// goes beyond its bound (ev.over) rather than forget one, unless the table
// is at its hard limit (maxTableEntries), where the least recently used
// entry visited goes whatever it owes.
//
// Recency is the shard's epoch at an entry's latest use (entry.used): the
// age is how many insertions into the shard came since. Ties go to the
// entry visited first. The two entries chosen so far stay locked, so
// that what made them candidates still holds when one is dropped.
func makeRoom(sh *memShard, bound int, now int64, ev *evicted) {
	var victim, anyVictim *entry
	var oldest, anyOldest uint32
	cur := sh.epoch.Load()
	visited, candidates := 0, 0
	// drop unlocks e unless it is still a candidate.
	drop := func(e *entry) {
		if e != nil && e != victim && e != anyVictim {
			e.unlock()
		}
	}
	sh.t.each(rand.Uint32(), func(old *entry) bool {
		visited++
		old.lock()
		switch age := (cur - old.used()) & epochMask; {
		case old.idleFull(now) || old.mark.followed():
			// Full by now, or a copy of what the shared store holds.
			sh.t.delete(old)
			old.unlock()
			if sh.t.n < bound {
				return false
			}
		case old.inDebt():
			if anyVictim == nil || age > anyOldest {
				prev := anyVictim
				anyVictim, anyOldest = old, age
				drop(prev)
			} else {
				old.unlock()
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
				old.unlock()
			}
			candidates++
		}
		return candidates < evictSample && visited < evictVisit
	})
	switch {
	case sh.t.n < bound:
	case victim != nil:
		sh.t.delete(victim)
		ev.lossy++
	case sh.t.n < maxTableEntries:
		ev.over++
	default:
		sh.t.delete(anyVictim)
		ev.lossy++
	}
	if victim != nil {
		victim.unlock()
	}
	if anyVictim != nil && anyVictim != victim {
		anyVictim.unlock()
	}
}

// Follow lowers the four per-minute buckets r would spend, as of r.Now,
// to at most the levels d reports (Decision.Remaining): a bucket above its
// reported level is set to it, one at or below keeps its own. It is for a
// store that keeps a MemoryStore as its fallback (as redisstore's
// WithFallbackLocal does): fed each decision of the shared store, the
// fallback, when a call to the shared store fails, decides from what that
// store last reported, refilled since, instead of from full buckets, and
// does not admit what the shared buckets had already spent. Taking the
// lower of the two keeps what the fallback itself admitted while the
// shared store was out of reach, as long as the shared store reports no
// more than that (the larger of the two spends is kept, not their sum:
// the caller charges the fallback's admissions to the shared store, as
// redisstore does, for the sum). A level below the memory store's debt
// floor (−2 × capacity) is taken at the floor. Calendar and session
// windows (the plan's lent ones included) are followed too: each takes the
// larger of its own spend and the one d reports (Decision.KeyWindows...,
// with WindowLevels.Reset naming the period or session), so that an outage
// never gives a spent quota back. Rolling windows and gauges are not
// followed; an entry not tracked yet is created, full, then lowered. An
// entry Follow set, until this store spends on it, is a copy: it goes
// first when room is needed, without counting as an eviction, debt or not
// (see MemoryStore).
func (s *MemoryStore) Follow(r AdmitRequest, d Decision) {
	now := r.Now.UnixNano()
	kl, wl := r.KeyLimits, r.WorkspaceLimits
	quota := quotaRequest(&r)
	if quota {
		// An Unlimited bucket is kept full (entryLimits): a reported 0 is
		// no level to follow.
		kl, wl = entryLimits(kl), entryLimits(wl)
		for i, f := range [4]int64{r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute, r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute} {
			if f == Unlimited {
				d.Remaining[i] = 2 * MaxPerMinute
			}
		}
	}
	if r.Solo {
		sh, e, ev := s.soloEntry(r.Workspace, r.Model, &wl, now)
		e.lower(d.Remaining[WorkspaceRequests], d.Remaining[WorkspaceTokens], &wl)
		e.release(sh.epoch.Load())
		s.noteEvictions(ev)
		if quota {
			s.followQuotas(&r, &d)
		}
		return
	}
	ks, wsh, ke, we, ev := s.pair(r.Key, r.Workspace, r.Model, &kl, &wl, now)
	ke.lower(d.Remaining[KeyRequests], d.Remaining[KeyTokens], &kl)
	we.lower(d.Remaining[WorkspaceRequests], d.Remaining[WorkspaceTokens], &wl)
	releasePair(ks, wsh, ke, we)
	s.noteEvictions(ev)
	if quota {
		s.followQuotas(&r, &d)
	}
}

// lower sets each of e's buckets above the level given for it (requests,
// tokens) to that level, floored at the debt floor, and settles e. It
// marks e followed when e then holds what was reported, or was followed
// already: until this store spends on it, it may be dropped for room, in
// debt or not, without loss (makeRoom). An entry below what was reported
// holds spending of this store's own that the shared store has not seen
// (yet): it is not marked.
func (e *entry) lower(req, tok int64, lim *Limits) {
	copyOf := e.mark.followed() // settle clears it
	reqAt := e.req.lower(req, 2*lim.RequestsPerMinute)
	tokAt := e.tok.lower(tok, 2*lim.TokensPerMinute)
	e.settle(lim)
	if copyOf || reqAt && tokAt {
		e.mark |= markFollowed
	}
}

// Levels returns the whole-unit level of the four default buckets of (key,
// workspace) as of now under the given figures, indexed by Bucket, without
// changing anything. Buckets not tracked are full at their figures. A Solo
// key (its own workspace, kept once as its workspace's entry) reports that
// entry for both scopes; a key named like its workspace that was admitted
// without Solo, or never, reports its own buckets.
//
// Levels is shorthand for ModelLevels(key, workspace, "", kl, wl, now).
func (s *MemoryStore) Levels(key, workspace string, kl, wl Limits, now time.Time) [4]int64 {
	return s.ModelLevels(key, workspace, "", kl, wl, now)
}

// ModelLevels is Levels for the buckets of a ModelLimits entry (model is
// the entry's name as configured, e.g. "gpt-4o*"; "" for the default
// buckets).
func (s *MemoryStore) ModelLevels(key, workspace, model string, kl, wl Limits, now time.Time) [4]int64 {
	b := s.exactLevels(key, workspace, model, kl, wl, now)
	return [4]int64{b[KeyRequests].level, b[KeyTokens].level, b[WorkspaceRequests].level, b[WorkspaceTokens].level}
}

// exactLevels is ModelLevels with each bucket's fraction.
func (s *MemoryStore) exactLevels(key, workspace, model string, kl, wl Limits, now time.Time) [4]bucket {
	pk, wh := s.hashes(key, workspace, model)
	ks, wsh := s.shards(pk, wh)
	n := now.UnixNano()
	ks.mu.Lock()
	kp := ks.t.get(pk)
	ke := peek(kp, n, kl)
	ks.mu.Unlock()
	wsh.mu.Lock()
	we := peek(wsh.t.get(wh), n, wl)
	wsh.mu.Unlock()
	if kp == nil && key == workspace && we.solo { // read under the entry's lock
		ke = we // a Solo key's buckets are kept once, as its workspace's
	}
	return [4]bucket{ke.req, ke.tok, we.req, we.tok}
}

// entryView is a copy of an entry's buckets and solo flag.
type entryView struct {
	req, tok bucket
	solo     bool
}

// peek returns e's buckets advanced to now under lim, changing nothing
// (full at lim when e is nil). The caller holds e's shard's lock.
func peek(e *entry, now int64, lim Limits) entryView {
	var c entry
	if e == nil {
		c.fill(now, &lim)
	} else {
		e.lock()
		c.last, c.req, c.tok, c.mark = e.last, e.req, e.tok, e.mark
		e.unlock()
		c.advance(now, &lim)
	}
	return entryView{req: c.req, tok: c.tok, solo: c.mark.solo()}
}
