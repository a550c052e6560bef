package llmrate

import "github.com/llmrate/llmrate/internal/memstore"

// IDRecords returns how many admission and reconcile identities s holds
// (expired ones not yet popped included) and how many identities expiry
// has examined in all.
func IDRecords(s *MemoryStore) (admits, recons int, touched int64) {
	t := s.ids.Load()
	if t == nil {
		return 0, 0, 0
	}
	return t.Counts()
}

// SetIDBounds sets the most admission and reconcile identities s holds;
// before its first identity.
func SetIDBounds(s *MemoryStore, admits, recons int) {
	s.ids.Store(memstore.NewIDs[Decision](admits, recons))
}
