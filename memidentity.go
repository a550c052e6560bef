package llmrate

import "github.com/llmrate/llmrate/internal/memstore"

// idsOf returns s's identity table (internal/memstore/ids.go), made on
// first use: the limiter sends no identity to the memory store (an
// in-process call loses no reply), so only direct callers, and the Redis
// store's local fallback, pay for it.
func (s *MemoryStore) idsOf() *memstore.IDs[Decision] {
	if t := s.ids.Load(); t != nil {
		return t
	}
	s.ids.CompareAndSwap(nil, memstore.NewIDs[Decision](memstore.AdmitIDLimit, memstore.ReconcileIDLimit))
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
		return t.Forgotten()
	}
	return 0
}

// admitOnce decides r (which has an ID) at most once: a repeat within
// five seconds of its clock (memstore.AdmitIDLife) gets the first
// decision. A refusal debited nothing and is not remembered.
func (s *MemoryStore) admitOnce(r *AdmitRequest) (Decision, error) {
	now := r.Now.UnixNano()
	t := s.idsOf()
	sh := t.Lock(r.ID)
	defer sh.Mu.Unlock()
	if d, ok := sh.Admits.Get(r.ID, now); ok {
		return d, nil
	}
	d, err := s.admitAny(r)
	if err == nil && d.Allowed {
		t.Admit(sh, r.ID, d, now)
	}
	return d, err
}

// reconcileOnce applies r (which has an ID) at most once within thirty
// seconds of its clock (memstore.ReconcileIDLife).
func (s *MemoryStore) reconcileOnce(r *ReconcileRequest) {
	now := r.Now.UnixNano()
	t := s.idsOf()
	sh := t.Lock(r.ID)
	defer sh.Mu.Unlock()
	if _, ok := sh.Recons.Get(r.ID, now); ok {
		return
	}
	s.reconcile(r)
	t.Reconcile(sh, r.ID, now)
}
