package llmrate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// BenchmarkAdmitGaugedHotKey: admission and its reconcile (the release) of
// one known key under a key and a workspace gauge, serial: what a gauge
// adds to BenchmarkAdmitHotKey (plus its reconcile).
func BenchmarkAdmitGaugedHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	req.KeyLimits.ConcurrentRequests, req.WorkspaceLimits.ConcurrentRequests = 64, 64
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "adm-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		req.ID = ids[i%len(ids)]
		if d, _ := s.Admit(ctx, req); !d.Allowed {
			b.Fatal("refused")
		}
		_ = s.Reconcile(ctx, llmrate.ReconcileRequest{Key: req.Key, Workspace: req.Workspace, KeyLimits: req.KeyLimits, WorkspaceLimits: req.WorkspaceLimits,
			Estimate: 1, Actual: 1, Solo: req.Solo, Now: req.Now, ID: req.ID})
	}
}

// BenchmarkAdmitMaxWaitHotKey: BenchmarkAdmitHotKey with MaxWait set, for
// requests that fit now (the common case under WithMaxWait).
func BenchmarkAdmitMaxWaitHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	req.MaxWait = time.Second
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		if d, _ := s.Admit(ctx, req); !d.Allowed || d.Wait != 0 {
			b.Fatal("refused or waited")
		}
	}
}

// benchMiddleware is BenchmarkMiddleware under the given figures and
// options.
func benchMiddleware(b *testing.B, lim llmrate.Limits, opts ...llmrate.Option) {
	tt := llmrate.TierTable{Free: lim, Developer: lim, Team: lim, Growth: lim, Scale: lim, Enterprise: lim}
	l, err := llmrate.New(append([]llmrate.Option{llmrate.WithTiers(tt)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
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

// BenchmarkMiddlewareGauged: BenchmarkMiddleware with a concurrency cap
// (an admission ID, a slot taken and released by the reconcile).
func BenchmarkMiddlewareGauged(b *testing.B) {
	benchMiddleware(b, llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute, ConcurrentRequests: 64})
}

// BenchmarkMiddlewareMaxWait: BenchmarkMiddleware with WithMaxWait, every
// request fitting now (a waiter place taken and given back).
func BenchmarkMiddlewareMaxWait(b *testing.B) {
	benchMiddleware(b, llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}, llmrate.WithMaxWait(time.Second))
}
