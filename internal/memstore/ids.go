package memstore

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
	AdmitIDLife     = 5 * time.Second
	ReconcileIDLife = 30 * time.Second
)

// The most identities the memory store holds: 65,536 admissions (the last
// 5 s of 13,107 a second) and 262,144 reconciles (the last 30 s of 8,738
// a second); measured at the limiter's 22-byte IDs, about 245 and 101
// bytes each, so some 40 MiB in all at both bounds. Each of the 16 shards
// (by the ID's hash) holds a sixteenth: past its share the shard's oldest
// identity is forgotten for room, and counted (ForgottenIDs): a resend of
// it is then decided, or applied, again.
const (
	AdmitIDLimit     = 1 << 16
	ReconcileIDLimit = 1 << 18
)

const idShards = 16

// IDs holds the identities the memory store has seen, each shard's in
// a ring ordered by time beside a map (internal/idrecord), so that a
// request pops only identities whose life is over, a few at a time: O(1)
// per request whatever the rate. It is made on the first request carrying
// one: the limiter sends none to the memory store (an in-process call
// loses no reply), so only direct callers (and the Redis store's local
// fallback, which is sent every identity while Redis is out) pay for it.
type IDs[D any] struct {
	seed      maphash.Seed
	shards    [idShards]IDShard[D]
	forgotten atomic.Int64 // identities forgotten before their life ended, for room
}

// IDShard is one shard of an IDs: its lock, and its admissions' decisions
// and applied reconciles by ID, read under it. The root's admitOnce and
// reconcileOnce hold the lock (Lock) across the admission or reconcile it
// guards, and read the records themselves: a method returning a decision
// would copy it once more on the commonest call with an ID, a resend
// (bench/memstore-move-instructions.txt).
type IDShard[D any] struct {
	Mu     sync.Mutex
	Admits *idrecord.Record[string, D]        // admitted, by ID; record with IDs.Admit
	Recons *idrecord.Record[string, struct{}] // applied, by ID; record with IDs.Reconcile
}

// NewIDs returns a table holding at most admits and recons identities
// (rounded up to a multiple of idShards), remembering each admission's
// decision, of type D.
func NewIDs[D any](admits, recons int) *IDs[D] {
	t := &IDs[D]{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i] = IDShard[D]{
			Admits: idrecord.New[string, D](AdmitIDLife, (admits+idShards-1)/idShards),
			Recons: idrecord.New[string, struct{}](ReconcileIDLife, (recons+idShards-1)/idShards),
		}
	}
	return t
}

// Lock returns id's shard, locked. Its lock is held across the admission
// or reconcile it guards (taken before the buckets' locks, never after), so
// two concurrent sends of one ID are decided once; the caller unlocks it
// (IDShard.Mu).
func (t *IDs[D]) Lock(id string) *IDShard[D] {
	sh := &t.shards[maphash.String(t.seed, id)%idShards]
	sh.Mu.Lock()
	return sh
}

// Admit records admission id's decision d (an admission: a refusal
// debited nothing and is not remembered), forgetting the shard's oldest
// for room when it is full (counted in Forgotten). The caller holds sh's
// lock.
func (t *IDs[D]) Admit(sh *IDShard[D], id string, d D, now int64) {
	put(&t.forgotten, sh.Admits, id, d, now)
}

// Reconcile records that reconcile id was applied, as Admit does. The
// caller holds sh's lock.
func (t *IDs[D]) Reconcile(sh *IDShard[D], id string, now int64) {
	put(&t.forgotten, sh.Recons, id, struct{}{}, now)
}

// put records id in r, forgetting r's oldest identity for room when r is
// full (counted in forgotten).
func put[V any](forgotten *atomic.Int64, r *idrecord.Record[string, V], id string, v V, now int64) {
	for !r.Put(id, v, now) {
		r.DropOldest()
		forgotten.Add(1)
	}
}

// Forgotten returns how many identities were forgotten before their life
// ended, for room.
func (t *IDs[D]) Forgotten() int64 { return t.forgotten.Load() }

// Counts returns how many admission and reconcile identities t holds
// (expired ones not yet popped included) and how many identities expiry
// has examined in all.
func (t *IDs[D]) Counts() (admits, recons int, touched int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.Mu.Lock()
		admits += sh.Admits.Len()
		recons += sh.Recons.Len()
		touched += sh.Admits.Touched() + sh.Recons.Touched()
		sh.Mu.Unlock()
	}
	return admits, recons, touched
}
