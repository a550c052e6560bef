package llmrate

import (
	"hash/maphash"
	"sync"
	"time"
)

// How long the memory store remembers an identity (AdmitRequest.ID,
// ReconcileRequest.ID), by the requests' clock (their Now): an admission's
// decision a few seconds, for a caller resending it; a reconcile's
// application thirty, past the limiter's five seconds of retries.
const (
	memAdmitIDLife     = 5 * time.Second
	memReconcileIDLife = 30 * time.Second
)

const idShards = 16

// idTable holds the identities the memory store has seen. It is made on the
// first request carrying one: the limiter sends none to the memory store
// (an in-process call loses no reply), so only direct callers pay for it.
type idTable struct {
	seed   maphash.Seed
	shards [idShards]idShard
}

type idShard struct {
	mu      sync.Mutex
	admits  map[string]idAdmit // admitted, by ID
	recons  map[string]int64   // applied, by ID: expiry (unix ns)
	sweepAt int
}

type idAdmit struct {
	d   Decision
	exp int64 // unix ns
}

// idTableOf returns s's identity table, made on first use.
func (s *MemoryStore) idTableOf() *idTable {
	if t := s.ids.Load(); t != nil {
		return t
	}
	t := &idTable{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i] = idShard{admits: map[string]idAdmit{}, recons: map[string]int64{}, sweepAt: minSweep}
	}
	if s.ids.CompareAndSwap(nil, t) {
		return t
	}
	return s.ids.Load()
}

// shard returns id's shard, locked. Its lock is held across the admission
// or reconcile it guards (taken before the buckets' locks, never after), so
// two concurrent sends of one ID are decided once.
func (t *idTable) shard(id string) *idShard {
	sh := &t.shards[maphash.String(t.seed, id)%idShards]
	sh.mu.Lock()
	return sh
}

// sweep drops expired identities once the shard has doubled since the last
// sweep (amortised).
func (sh *idShard) sweep(now int64) {
	if len(sh.admits)+len(sh.recons) < sh.sweepAt {
		return
	}
	for id, a := range sh.admits {
		if a.exp <= now {
			delete(sh.admits, id)
		}
	}
	for id, exp := range sh.recons {
		if exp <= now {
			delete(sh.recons, id)
		}
	}
	sh.sweepAt = max(minSweep, 2*(len(sh.admits)+len(sh.recons)))
}

// admitOnce decides r (which has an ID) at most once: a repeat within
// memAdmitIDLife gets the first decision. A refusal debited nothing and is
// not remembered.
func (s *MemoryStore) admitOnce(r AdmitRequest) (Decision, error) {
	now := r.Now.UnixNano()
	sh := s.idTableOf().shard(r.ID)
	defer sh.mu.Unlock()
	if a, ok := sh.admits[r.ID]; ok && now < a.exp {
		return a.d, nil
	}
	d, err := s.admitAny(r)
	if err == nil && d.Allowed {
		sh.sweep(now)
		sh.admits[r.ID] = idAdmit{d: d, exp: now + int64(memAdmitIDLife)}
	}
	return d, err
}

// reconcileOnce applies r (which has an ID) at most once within
// memReconcileIDLife.
func (s *MemoryStore) reconcileOnce(r ReconcileRequest) {
	now := r.Now.UnixNano()
	sh := s.idTableOf().shard(r.ID)
	defer sh.mu.Unlock()
	if exp, ok := sh.recons[r.ID]; ok && now < exp {
		return
	}
	s.reconcile(r)
	sh.sweep(now)
	sh.recons[r.ID] = now + int64(memReconcileIDLife)
}
