package redisstore

import (
	"cmp"
	"context"
	"time"

	"github.com/llmrate/llmrate"
)

// ReturnIdleLeases runs the returner's pass now: every lease last used
// before idleSince goes back to Redis (every lease for the zero time).
func (s *Store) ReturnIdleLeases(ctx context.Context, idleSince time.Time) error {
	return s.returnLeases(ctx, idleSince)
}

// Leased is the number of admissions decided on a lease.
func (s *Store) Leased() int { return int(s.leases.local.Load()) }

// AdmitTogether decides rs in one batched script call, in order, as
// admissions arriving together while a call is in flight are; each
// decision with its error.
func (s *Store) AdmitTogether(rs []llmrate.AdmitRequest) ([]llmrate.Decision, []error) {
	batch := make([]*pending, len(rs))
	for i, r := range rs {
		k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
		batch[i] = &pending{r: r, k: k, w: w, done: make(chan struct{})}
	}
	s.runBatch(batch)
	ds, errs := make([]llmrate.Decision, len(rs)), make([]error, len(rs))
	for i, p := range batch {
		ds[i], errs[i] = p.d, p.err
	}
	return ds, errs
}

// WaitCharges waits for the goroutine sending the fallback's charges
// (started by the last call Redis answered) to stop.
func (s *Store) WaitCharges() { s.charges.wg.Wait() }

// SetMaxCharges sets how many fallback admissions a store tracks for
// charging, until the returned func restores it.
func SetMaxCharges(n int) (restore func()) {
	old := maxCharges
	maxCharges = n
	return func() { maxCharges = old }
}

// SeenIDs returns how many reconcile identities the store's leases hold
// (expired ones not yet popped included), the most they hold, and how many
// expiry has examined in all.
func (s *Store) SeenIDs() (held, limit int, touched int64) {
	s.seen.mu.Lock()
	defer s.seen.mu.Unlock()
	if s.seen.r == nil {
		return 0, cmp.Or(s.seen.limit, seenIDLimit), 0
	}
	return s.seen.r.Len(), s.seen.r.Max(), s.seen.r.Touched()
}

// SetSeenBound sets the most reconcile identities the store's leases hold;
// before its first reconcile.
func (s *Store) SetSeenBound(n int) {
	s.seen.mu.Lock()
	defer s.seen.mu.Unlock()
	s.seen.limit = n
}
