package llmrate

// IDRecords returns how many admission and reconcile identities s holds
// (expired ones not yet popped included) and how many identities expiry
// has examined in all.
func IDRecords(s *MemoryStore) (admits, recons int, touched int64) {
	t := s.ids.Load()
	if t == nil {
		return 0, 0, 0
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		admits += sh.admits.Len()
		recons += sh.recons.Len()
		touched += sh.admits.Touched() + sh.recons.Touched()
		sh.mu.Unlock()
	}
	return admits, recons, touched
}

// SetIDBounds sets the most admission and reconcile identities s holds;
// before its first identity.
func SetIDBounds(s *MemoryStore, admits, recons int) {
	s.ids.Store(newIDTable(admits, recons))
}
