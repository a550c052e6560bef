package llmrate

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate/internal/idrecord"
)

// How long the memory store remembers an identity (AdmitRequest.ID,
// ReconcileRequest.ID), by the requests' clock (their Now): an admission's
// decision a few seconds, for a caller resending it; a reconcile's
// application thirty, past the limiter's five seconds of retries.
const (
	memAdmitIDLife     = 5 * time.Second
	memReconcileIDLife = 30 * time.Second
)

// The most identities the memory store holds: 65,536 admissions (the last
// 5 s of 13,107 a second) and 262,144 reconciles (the last 30 s of 8,738
// a second); measured at the limiter's 22-byte IDs, about 245 and 101
// bytes each, so some 40 MiB in all at both bounds. Each of the 16 shards
// (by the ID's hash) holds a sixteenth: past its share the shard's oldest
// identity is forgotten for room, and counted (ForgottenIDs): a resend of
// it is then decided, or applied, again.
const (
	memAdmitIDLimit     = 1 << 16
	memReconcileIDLimit = 1 << 18
)

const idShards = 16

// idTable holds the identities the memory store has seen, each shard's in
// a ring ordered by time beside a map (internal/idrecord), so that a
// request pops only identities whose life is over, a few at a time: O(1)
// per request whatever the rate. It is made on the first request carrying
// one: the limiter sends none to the memory store (an in-process call
// loses no reply), so only direct callers (and the Redis store's local
// fallback, which is sent every identity while Redis is out) pay for it.
type idTable struct {
	seed      maphash.Seed
	shards    [idShards]idShard
	forgotten atomic.Int64 // identities forgotten before their life ended, for room
}

type idShard struct {
	mu     sync.Mutex
	admits *idrecord.Record[string, Decision] // admitted, by ID
	recons *idrecord.Record[string, struct{}] // applied, by ID
}

// newIDTable returns a table holding at most admits and recons identities
// (rounded up to a multiple of idShards).
func newIDTable(admits, recons int) *idTable {
	t := &idTable{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i] = idShard{
			admits: idrecord.New[string, Decision](memAdmitIDLife, (admits+idShards-1)/idShards),
			recons: idrecord.New[string, struct{}](memReconcileIDLife, (recons+idShards-1)/idShards),
		}
	}
	return t
}

// idTableOf returns s's identity table, made on first use.
func (s *MemoryStore) idTableOf() *idTable {
	if t := s.ids.Load(); t != nil {
		return t
	}
	s.ids.CompareAndSwap(nil, newIDTable(memAdmitIDLimit, memReconcileIDLimit))
	return s.ids.Load()
}

// ForgottenIDs returns how many identities (AdmitRequest.ID,
// ReconcileRequest.ID) the store forgot before the end of their life (5 s,
// 30 s) because it held its bound of them: 65,536 admissions and 262,144
// reconciles, the oldest of a shard forgotten first. A resend of one of
// those is decided, or applied, again. Each of the store's 16 shards holds
// a sixteenth of each bound, so forgetting starts a little before the
// store holds a whole bound (some 13,000 admissions and 8,700 reconciles
// with identities a second, sustained).
func (s *MemoryStore) ForgottenIDs() int64 {
	if t := s.ids.Load(); t != nil {
		return t.forgotten.Load()
	}
	return 0
}

// shard returns id's shard, locked. Its lock is held across the admission
// or reconcile it guards (taken before the buckets' locks, never after), so
// two concurrent sends of one ID are decided once.
func (t *idTable) shard(id string) *idShard {
	sh := &t.shards[maphash.String(t.seed, id)%idShards]
	sh.mu.Lock()
	return sh
}

// put records id in r, forgetting r's oldest identity for room when r is
// full (counted in t.forgotten).
func put[V any](t *idTable, r *idrecord.Record[string, V], id string, v V, now int64) {
	for !r.Put(id, v, now) {
		r.DropOldest()
		t.forgotten.Add(1)
	}
}

// admitOnce decides r (which has an ID) at most once: a repeat within
// memAdmitIDLife gets the first decision. A refusal debited nothing and is
// not remembered.
func (s *MemoryStore) admitOnce(r AdmitRequest) (Decision, error) {
	now := r.Now.UnixNano()
	t := s.idTableOf()
	sh := t.shard(r.ID)
	defer sh.mu.Unlock()
	if d, ok := sh.admits.Get(r.ID, now); ok {
		return d, nil
	}
	d, err := s.admitAny(&r)
	if err == nil && d.Allowed {
		put(t, sh.admits, r.ID, d, now)
	}
	return d, err
}

// reconcileOnce applies r (which has an ID) at most once within
// memReconcileIDLife.
func (s *MemoryStore) reconcileOnce(r ReconcileRequest) {
	now := r.Now.UnixNano()
	t := s.idTableOf()
	sh := t.shard(r.ID)
	defer sh.mu.Unlock()
	if _, ok := sh.recons.Get(r.ID, now); ok {
		return
	}
	s.reconcile(&r)
	put(t, sh.recons, r.ID, struct{}{}, now)
}
