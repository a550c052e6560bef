package llmrate

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLimiterFillsMemoryIDTable: memidentity.go (and
// internal/memstore/ids.go) say the limiter
// sends no identity to the memory store, "so only direct callers pay for"
// the identity table. Under a gauge (ConcurrentRequests) it does send one
// with every admission and reconcile: each gauged request leaves an
// admission record for 5 s and a reconcile record for 30 s in the table,
// though an in-process call never loses a reply.
func TestLimiterFillsMemoryIDTable(t *testing.T) {
	store := NewMemoryStore()
	lim := Limits{RequestsPerMinute: 100_000, TokensPerMinute: 10_000_000, ConcurrentRequests: 8}
	l, err := New(WithStore(store), WithTiers(TierTable{Free: lim, Developer: lim, Team: lim, Growth: lim, Scale: lim, Enterprise: lim}))
	if err != nil {
		t.Fatal(err)
	}
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	const n = 100
	for range n {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer sk-a")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("status %d", w.Code)
		}
	}
	records := 0
	if tb := store.ids.Load(); tb != nil {
		admits, recons, _ := tb.Counts()
		records = admits + recons
	}
	if records != 0 {
		t.Errorf("after %d gauged requests through the limiter the memory store holds %d identity records; its doc says the limiter sends none", n, records)
	}
}
