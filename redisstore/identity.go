package redisstore

import (
	"cmp"
	"hash/maphash"
	"sync"
	"time"

	"github.com/llmrate/llmrate/internal/idrecord"
)

// ForgottenIDs returns how many identities the local fallback
// (WithFallbackLocal), which is sent every admission and its reconcile
// while Redis is out, forgot before the end of their life because it held
// its bound of them (llmrate.MemoryStore.ForgottenIDs: 65,536 admissions
// and 262,144 reconciles): a resend of one of those is decided, or
// applied, again by the fallback. Zero without a fallback. The identities
// this process's leases keep are never forgotten early (see WithLeases).
func (s *Store) ForgottenIDs() int64 {
	if s.fallback == nil {
		return 0
	}
	return s.fallback.ForgottenIDs()
}

// seenIDLimit bounds the reconcile identities a store with leases keeps:
// the last 30 s of 17,476 reconciles a second; about 104 bytes each
// (measured at 2^20, whatever the ID's length: the record keeps a 128-bit
// hash of it), some 52 MiB at the bound.
const seenIDLimit = 1 << 19

// seenRecord holds, with leases, the identities of this process's recent
// reconciles, each reconcileIDLife by the lease clock: those absorbed by
// its leases (a repeat is not applied again) and those sent to Redis (a
// repeat goes to Redis, which knows whether it was applied, never to a
// lease). It is a ring ordered by time beside a map (internal/idrecord):
// each reconcile pops only identities whose life is over, a few at a
// time, so its cost is O(1) whatever the rate. It holds at most
// seenIDLimit identities. A reconcile that finds it full is not absorbed
// but sent to Redis, which keeps its identity itself, and so is every
// reconcile until reconcileIDLife after the last one that found it full,
// so that a repeat of one not recorded is never absorbed: past the bound
// the leases stop absorbing reconciles (each costs a round trip, as
// without leases), and nothing is applied twice.
type seenRecord struct {
	mu    sync.Mutex
	r     *idrecord.Record[[2]uint64, bool] // absorbed, by the ID's key; nil until the first
	seeds [2]maphash.Seed                   // key's
	limit int                               // 0: seenIDLimit
	epoch time.Time                         // the origin of the record's times (lease clock)
	// No reconcile is absorbed before fullTill: one that found the
	// record full was not recorded.
	fullTill int64
}

// at returns now on the record's time line, its record made on first
// use. sr.mu is held.
func (sr *seenRecord) at(now time.Time) int64 {
	if sr.r == nil {
		sr.r, sr.epoch = idrecord.New[[2]uint64, bool](reconcileIDLife, cmp.Or(sr.limit, seenIDLimit)), now
		sr.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	}
	return int64(now.Sub(sr.epoch))
}

// key is id's name in the record: 128 bits of two keyed hashes, not the
// ID (16 bytes whatever its length, and no caller's string kept). Two IDs
// share a name with probability about n²/2^129 among n held: 2 × 10^-27
// at the bound.
func (sr *seenRecord) key(id string) [2]uint64 {
	return [2]uint64{maphash.String(sr.seeds[0], id), maphash.String(sr.seeds[1], id)}
}

// lookup reports whether reconcile id came lately, whether it was
// absorbed by a lease then, and whether a lease may absorb a reconcile
// now (open).
func (sr *seenRecord) lookup(id string, now time.Time) (seen, absorbed, open bool) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	t := sr.at(now)
	if id != "" {
		absorbed, seen = sr.r.Get(sr.key(id), t)
	}
	return seen, absorbed, t >= sr.fullTill
}

// What absorb found.
const (
	absorbOK      = iota // recorded: the lease applies it
	absorbDone           // absorbed by a send of it meanwhile: nothing to do
	absorbRefused        // full, or sent to Redis meanwhile: to Redis
)

// absorb records id as absorbed by a lease before the lease applies it.
func (sr *seenRecord) absorb(id string, now time.Time) int {
	if id == "" {
		return absorbOK // no identity: no repeat to know
	}
	sr.mu.Lock()
	defer sr.mu.Unlock()
	t := sr.at(now)
	if was, ok := sr.r.Get(sr.key(id), t); ok {
		if was {
			return absorbDone
		}
		return absorbRefused
	}
	if t < sr.fullTill {
		return absorbRefused // closed since lookup
	}
	if !sr.r.Put(sr.key(id), true, t) {
		sr.fullTill = t + int64(reconcileIDLife)
		return absorbRefused
	}
	return absorbOK
}

// sent records id as sent to Redis (renewing its life), unless a lease
// absorbed it.
func (sr *seenRecord) sent(id string, now time.Time) {
	if id == "" {
		return
	}
	sr.mu.Lock()
	defer sr.mu.Unlock()
	t := sr.at(now)
	if was, ok := sr.r.Get(sr.key(id), t); ok && was {
		return
	}
	if !sr.r.Put(sr.key(id), false, t) {
		sr.fullTill = t + int64(reconcileIDLife)
	}
}
