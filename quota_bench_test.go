package llmrate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// BenchmarkAdmitMonthlyHotKey: BenchmarkAdmitHotKey with a calendar month
// (UTC) on the key and on the workspace: the quota path's cost.
func BenchmarkAdmitMonthlyHotKey(b *testing.B) {
	s := llmrate.NewMemoryStore()
	req := benchAdmitReq("sk-hot")
	month := []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: llmrate.MaxPerMinute, Tokens: llmrate.MaxPerMinute}}
	req.KeyLimits.Windows, req.WorkspaceLimits.Windows = month, month
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		req.Now = time.Unix(0, int64(i))
		if d, _ := s.Admit(ctx, req); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkMiddlewareMonthly: BenchmarkMiddlewareDailyWindow with a
// calendar month (UTC) in place of the rolling day.
func BenchmarkMiddlewareMonthly(b *testing.B) {
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: llmrate.MaxPerMinute, Tokens: llmrate.MaxPerMinute}}}
	tt := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	l, err := llmrate.New(llmrate.WithTiers(tt))
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
