package memstore

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate/internal/calendar"
)

// Tables is the memory store's state: its key and workspace entries in
// 128 shards each (with each shard's gauges, window sets and quota sets),
// indexed by a per-store seeded hash, and its eviction counts. It knows
// figures only as numbers (requests and tokens a minute, a window's
// figure per meter): the root's MemoryStore decides requests on it.
//
// The zero Tables is not ready: use Init.
type Tables struct {
	seed     maphash.Seed
	perShard int
	keys     [Shards]Shard // key entries, by pair hash (pairHash)
	ws       [Shards]Shard // workspace entries, by workspace hash
	lossy    atomic.Int64
	over     atomic.Int64
	evict    Notifier
	cal      calendar.Cache // calendar windows' periods (quotaset.go)
}

// Init readies t for a bound of maxKeys entries of each class (positive),
// split evenly over the shards: never above maxKeys (from 128 on), nor
// above what a table holds (at least one a shard).
func (t *Tables) Init(maxKeys int) {
	t.seed = maphash.MakeSeed()
	t.perShard = min(max(1, maxKeys/Shards), maxTableEntries)
	for i := range t.keys {
		t.keys[i].sweepAt = minSweep
		t.ws[i].sweepAt = minSweep
	}
}

// Bound is the bound on each shard's entries (and window and quota sets).
func (t *Tables) Bound() int { return t.perShard }

// Hashes returns the pair hash that indexes the key's entry within its
// workspace, and the workspace hash, both for the buckets of model (a
// ModelLimits entry; "" for the default buckets).
func (t *Tables) Hashes(key, workspace, model string) (pk, wh uint64) {
	w0 := maphash.String(t.seed, workspace)
	kh := w0
	if key != workspace {
		kh = maphash.String(t.seed, key)
	}
	wh = t.withModel(w0, model)
	return pairHash(kh, wh), wh
}

// WorkspaceHash indexes the workspace's buckets of model ("" for the
// default buckets).
func (t *Tables) WorkspaceHash(workspace, model string) uint64 {
	return t.withModel(maphash.String(t.seed, workspace), model)
}

// withModel turns a workspace hash into the hash of that workspace's
// buckets of model: the default buckets ("") keep the workspace's own hash,
// a model entry's combine it with the entry's. For a fixed model the
// combination is a bijection of the workspace hash, so two (workspace,
// model) pairs share an entry only when seeded 64-bit hashes collide, as two
// workspaces do. A key's entries follow: they are indexed by the pair hash
// of the key and this hash.
func (t *Tables) withModel(wh uint64, model string) uint64 {
	if model == "" {
		return wh
	}
	return wh ^ bits.RotateLeft64(maphash.String(t.seed, model)*0xC2B2AE3D27D4EB4F, 23)
}

// pairHash combines a key hash and a workspace hash into one 64-bit index.
// For a fixed workspace it is a bijection of the key hash (and the other way
// round), so two pairs share an entry only when their seeded hashes collide
// on 64 bits, as two workspaces do. A single word keeps the map on its fast
// uint64 path and its slots at 8 bytes.
func pairHash(kh, wh uint64) uint64 {
	return kh ^ bits.RotateLeft64(wh*0x9E3779B97F4A7C15, 31)
}

// Shards returns the key shard of pair hash pk and the workspace shard of
// workspace hash wh.
func (t *Tables) Shards(pk, wh uint64) (*Shard, *Shard) {
	return &t.keys[shardIndex(pk)], &t.ws[shardIndex(wh)]
}

// KeyShard returns the key shard of pair hash pk.
func (t *Tables) KeyShard(pk uint64) *Shard { return &t.keys[shardIndex(pk)] }

// WorkspaceShard returns the workspace shard of hash wh (a Solo request's
// entry is kept there too).
func (t *Tables) WorkspaceShard(wh uint64) *Shard { return &t.ws[shardIndex(wh)] }

// shardIndex picks a shard by a hash's top bits (the low bits place the
// entry within the shard's table).
func shardIndex(h uint64) uint64 { return h >> 57 & (Shards - 1) }

// Figures are an entry's per-minute figures: its requests bucket's and its
// tokens bucket's (capacity: twice each).
type Figures struct{ Requests, Tokens int64 }

// Lock locks the key shard of pk, then the workspace shard of wh, then the
// key's entry, then the workspace's (the order shardState describes), and
// returns both shards and entries locked, the entries created full if
// absent (at kf and wf) and advanced to now. The caller releases the
// entries (ReleasePair) and then the shards.
func (t *Tables) Lock(pk, wh uint64, kf, wf Figures, now int64) (ks, wsh *Shard, ke, we *Entry, ev Evicted) {
	ks, wsh = t.Shards(pk, wh)
	ks.Mu.Lock()
	wsh.Mu.Lock()
	ke = ks.GetEntry(t.perShard, pk, kf.Requests, kf.Tokens, now, &ev)
	we = wsh.GetEntry(t.perShard, wh, wf.Requests, wf.Tokens, now, &ev)
	ke.Advance(now, kf.Requests, kf.Tokens)
	we.Advance(now, wf.Requests, wf.Tokens)
	we.mark.setSolo(false)
	return ks, wsh, ke, we, ev
}

// Pair returns the key's entry and the workspace's, both locked (and
// nothing else), created full if absent and advanced to now: found without
// the shards' locks when both are there, else by Lock. The caller releases
// the entries.
func (t *Tables) Pair(pk, wh uint64, kf, wf Figures, now int64) (ks, wsh *Shard, ke, we *Entry, ev Evicted) {
	ks, wsh = t.Shards(pk, wh)
	if ke = ks.t.Lookup(pk); ke != nil {
		if we = wsh.t.Lookup(wh); we != nil {
			ke.Advance(now, kf.Requests, kf.Tokens)
			we.Advance(now, wf.Requests, wf.Tokens)
			we.mark.setSolo(false)
			return ks, wsh, ke, we, ev
		}
		ke.Unlock() // the locked path takes the shards' locks first
	}
	ks, wsh, ke, we, ev = t.Lock(pk, wh, kf, wf, now)
	wsh.Mu.Unlock()
	ks.Mu.Unlock()
	return ks, wsh, ke, we, ev
}

// ReleasePair releases the entries of Pair or Lock, as used now.
func ReleasePair(ks, wsh *Shard, ke, we *Entry) {
	we.Release(wsh.epoch.Load())
	ke.Release(ks.epoch.Load())
}

// Solo returns the one entry of a Solo request (kept in the workspace
// shards), of hash wh, created full at f if absent and advanced to now,
// with its shard: both locked. The caller releases the entry, then the
// shard.
func (t *Tables) Solo(wh uint64, f Figures, now int64) (sh *Shard, e *Entry, ev Evicted) {
	sh = &t.ws[shardIndex(wh)]
	sh.Mu.Lock()
	e = sh.GetEntry(t.perShard, wh, f.Requests, f.Tokens, now, &ev)
	e.Advance(now, f.Requests, f.Tokens)
	e.mark.setSolo(true)
	return sh, e, ev
}

// SoloEntry is Solo holding only the entry's lock: found without the
// shard's lock when it is there, else by Solo. The caller releases the
// entry.
func (t *Tables) SoloEntry(wh uint64, f Figures, now int64) (sh *Shard, e *Entry, ev Evicted) {
	sh = &t.ws[shardIndex(wh)]
	if e = sh.t.Lookup(wh); e == nil {
		sh, e, ev = t.Solo(wh, f, now)
		sh.Mu.Unlock()
		return sh, e, ev
	}
	e.Advance(now, f.Requests, f.Tokens)
	e.mark.setSolo(true)
	return sh, e, ev
}

// Evicted counts, for one store call, the lossy evictions and the entries
// added beyond the bound that making room for its entries took.
type Evicted struct{ Lossy, Over int32 }

// Note counts ev in t (Evictions, OverBound) and tells the subscribers of
// the lossy evictions. Nearly every call has nothing to count: that test
// inlines into the caller, the counting is note's.
func (t *Tables) Note(ev Evicted) {
	if ev.Lossy|ev.Over != 0 {
		t.note(ev)
	}
}

// note is Note for a call that evicted, or went beyond the bound.
func (t *Tables) note(ev Evicted) {
	if ev.Over > 0 {
		t.over.Add(int64(ev.Over))
	}
	if ev.Lossy > 0 {
		t.lossy.Add(int64(ev.Lossy))
		t.evict.Notify(int(ev.Lossy))
	}
}

// Evictions returns the lossy evictions counted so far.
func (t *Tables) Evictions() int64 { return t.lossy.Load() }

// OverBound returns the entries and sets added beyond the bound so far.
func (t *Tables) OverBound() int64 { return t.over.Load() }

// Subscribe calls e.Evicted once per lossy eviction until stop is called
// (see Notifier.Add).
func (t *Tables) Subscribe(e Evictee) (stop func()) { return t.evict.Add(e) }

// Subscribers returns the number of distinct eviction subscribers.
func (t *Tables) Subscribers() int { return t.evict.Len() }

// Len returns the number of key entries and workspace entries held.
func (t *Tables) Len() (keys, workspaces int) {
	for i := range t.keys {
		t.keys[i].Mu.Lock()
		keys += t.keys[i].t.n
		t.keys[i].Mu.Unlock()
		t.ws[i].Mu.Lock()
		workspaces += t.ws[i].t.n
		t.ws[i].Mu.Unlock()
	}
	return keys, workspaces
}

// Levels returns the four default buckets of (key, workspace) of model,
// with their fractions, as of now under the given figures, changing
// nothing: key requests, key tokens, workspace requests, workspace tokens.
// Buckets not tracked are full at their figures. A Solo key (its own
// workspace, kept once as its workspace's entry) reports that entry for
// both scopes.
func (t *Tables) Levels(key, workspace, model string, kf, wf Figures, now time.Time) [4]Bucket {
	pk, wh := t.Hashes(key, workspace, model)
	ks, wsh := t.Shards(pk, wh)
	n := now.UnixNano()
	ks.Mu.Lock()
	kp := ks.t.Get(pk)
	ke := peek(kp, n, kf)
	ks.Mu.Unlock()
	wsh.Mu.Lock()
	we := peek(wsh.t.Get(wh), n, wf)
	wsh.Mu.Unlock()
	if kp == nil && key == workspace && we.solo { // read under the entry's lock
		ke = we // a Solo key's buckets are kept once, as its workspace's
	}
	return [4]Bucket{ke.req, ke.tok, we.req, we.tok}
}

// entryView is a copy of an entry's buckets and solo flag.
type entryView struct {
	req, tok Bucket
	solo     bool
}

// peek returns e's buckets advanced to now under f, changing nothing
// (full at f when e is nil). The caller holds e's shard's lock.
func peek(e *Entry, now int64, f Figures) entryView {
	var c Entry
	if e == nil {
		c.fill(now, f.Requests, f.Tokens)
	} else {
		e.Lock()
		c.Last, c.Req, c.Tok, c.mark = e.Last, e.Req, e.Tok, e.mark
		e.Unlock()
		c.Advance(now, f.Requests, f.Tokens)
	}
	return entryView{req: c.Req, tok: c.Tok, solo: c.mark.solo()}
}
