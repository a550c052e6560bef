package llmrate

// Quotas implements QuotaStore.
func (*MemoryStore) Quotas() {}
