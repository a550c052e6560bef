package llmrate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
)

func benchAdmitReq(key string) llmrate.AdmitRequest {
	free := llmrate.DefaultTiers().Free
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	_ = free
	return llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: huge, WorkspaceLimits: huge, Tokens: 1, Now: time.Unix(1, 0)}
}

// BenchmarkAdmitHotKey: four-bucket admission of one known key, serial.
func BenchmarkAdmitHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		if d, _ := s.Admit(ctx, req); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkAdmitHotKeyParallel: one known key from every goroutine.
func BenchmarkAdmitHotKeyParallel(b *testing.B) {
	s := llmrate.NewMemoryStore()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := benchAdmitReq("sk-hot")
		i := int64(0)
		for pb.Next() {
			i++
			req.Now = time.Unix(0, i)
			_, _ = s.Admit(ctx, req)
		}
	})
}

// BenchmarkAdmitDistinctKeys: 100,000 keys round-robin, parallel.
func BenchmarkAdmitDistinctKeys(b *testing.B) {
	s := llmrate.NewMemoryStore()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("sk-%08d", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := benchAdmitReq("")
		i := int(time.Now().UnixNano() % 100_000)
		for pb.Next() {
			i++
			req.Key = keys[i%len(keys)]
			req.Workspace = req.Key
			_, _ = s.Admit(ctx, req)
		}
	})
}

// reusableWriter is a ResponseWriter reused across iterations.
type reusableWriter struct{ h http.Header }

func (w *reusableWriter) Header() http.Header         { return w.h }
func (w *reusableWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *reusableWriter) WriteHeader(int)             {}

var oneKBResponse = []byte(`{"id":"chatcmpl-abc123","object":"chat.completion","created":1732000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("word ", 150) + `","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":150,"total_tokens":169},"system_fingerprint":"fp_abc"}`)

// BenchmarkMiddleware: the whole per-request overhead (admit, wrap, scan a
// 1 KB OpenAI JSON response with usage, reconcile).
func BenchmarkMiddleware(b *testing.B) {
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	tt := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	l, _ := llmrate.New(llmrate.WithTiers(tt))
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(oneKBResponse)
	})
	h := l.Middleware(next)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer sk-bench")
	r.ContentLength = 400
	w := &reusableWriter{h: http.Header{}}
	b.ReportAllocs()
	for range b.N {
		h.ServeHTTP(w, r)
	}
}

// BenchmarkBareHandler: the same handler without the middleware.
func BenchmarkBareHandler(b *testing.B) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(oneKBResponse)
	})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	w := &reusableWriter{h: http.Header{}}
	b.ReportAllocs()
	for range b.N {
		next.ServeHTTP(w, r)
	}
}

// TestAdmitHotPathAllocs: admitting a known key allocates nothing. A
// regression fails CI without timing anything.
func TestAdmitHotPathAllocs(t *testing.T) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-allocs")
	ctx := context.Background()
	_, _ = s.Admit(ctx, req) // the key is now known
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = s.Admit(ctx, req)
		_ = s.Reconcile(ctx, llmrate.ReconcileRequest{Key: req.Key, Workspace: req.Workspace, KeyLimits: req.KeyLimits, WorkspaceLimits: req.WorkspaceLimits, Estimate: 1, Actual: 2, Now: req.Now})
	})
	assert.Zero(t, allocs, "allocations per admission+reconcile of a known key")

	req.Model = "gpt-4o*" // a model entry's buckets: one more hash, no allocation
	_, _ = s.Admit(ctx, req)
	allocs = testing.AllocsPerRun(1000, func() {
		_, _ = s.Admit(ctx, req)
		_ = s.Reconcile(ctx, llmrate.ReconcileRequest{Key: req.Key, Workspace: req.Workspace, Model: req.Model, KeyLimits: req.KeyLimits, WorkspaceLimits: req.WorkspaceLimits, Estimate: 1, Actual: 2, Now: req.Now})
	})
	assert.Zero(t, allocs, "allocations per admission+reconcile of a known key on a model entry")
}
