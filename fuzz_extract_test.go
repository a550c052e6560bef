package llmrate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// FuzzExtractors: an extracted key is never empty and never holds
// whitespace or control bytes; a missing key is ErrNoKey.
func FuzzExtractors(f *testing.F) {
	for _, s := range []string{"Bearer sk-1", "bearer  sk-2 ", "Basic x", "Bearer a b", "Bearer \x00", "", "Bearer", "BEARER\tk"} {
		f.Add(s, "sk-anthropic")
	}
	f.Fuzz(func(t *testing.T, auth, apiKey string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header["Authorization"] = []string{auth}
		r.Header["X-Api-Key"] = []string{apiKey}
		for _, ex := range []llmrate.Extractor{llmrate.BearerToken(), llmrate.Header("X-Api-Key")} {
			k, err := ex(r)
			if err != nil {
				if err != llmrate.ErrNoKey || k != "" {
					t.Fatalf("error %v with key %q", err, k)
				}
				continue
			}
			if k == "" || strings.ContainsFunc(k, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
				t.Fatalf("extracted %q from %q / %q", k, auth, apiKey)
			}
		}
	})
}

// FuzzEstimate: the estimate is Content-Length/4 with a floor of 1, for any
// length.
func FuzzEstimate(f *testing.F) {
	for _, n := range []int64{-1, 0, 3, 4, 1 << 62, -1 << 63, 1<<63 - 1} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.ContentLength = n
		got := llmrate.EstimateTokens(r)
		want := max(int64(1), n/4)
		if got != want || got < 1 {
			t.Fatalf("EstimateTokens(%d) = %d, want %d", n, got, want)
		}
	})
}

// FuzzLimitsEndpoint: any method and credentials: never a panic, never a
// 5xx; 405 for other methods, 401 without a key, else the Free row.
func FuzzLimitsEndpoint(f *testing.F) {
	for _, m := range []string{"GET", "HEAD", "POST", "DELETE", "get"} {
		f.Add(m, "Bearer sk-1")
	}
	l, err := llmrate.New()
	if err != nil {
		f.Fatal(err)
	}
	h := l.LimitsHandler()
	f.Fuzz(func(t *testing.T, method, auth string) {
		if method == "" || strings.ContainsAny(method, " \t\r\n()<>@,;:\\\"/[]?={}") || !isToken(method) {
			return
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Method = method
		r.Header["Authorization"] = []string{auth}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch {
		case method != "GET" && method != "HEAD":
			if w.Code != http.StatusMethodNotAllowed {
				t.Fatalf("%s: %d", method, w.Code)
			}
		case w.Code == http.StatusOK:
			if method == "GET" && !strings.Contains(w.Body.String(), `"tier":"free"`) {
				t.Fatalf("body %s", w.Body.String())
			}
		case w.Code != http.StatusUnauthorized:
			t.Fatalf("%s %q: %d", method, auth, w.Code)
		}
	})
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// FuzzRefusalChangesNothing: whatever the figures, levels and request, a
// refused admission leaves all four buckets exactly as they were.
func FuzzRefusalChangesNothing(f *testing.F) {
	f.Add(int64(10), int64(100), int64(3), int64(50), int64(1000), uint32(7))
	f.Fuzz(func(t *testing.T, rpm, tpm, drainReq, drainTok, n int64, gapMS uint32) {
		rpm, tpm = 1+abs(rpm)%1000, 1+abs(tpm)%1_000_000
		n = 1 + abs(n)%(3*tpm)
		lim := llmrate.Limits{RequestsPerMinute: rpm, TokensPerMinute: tpm}
		s := llmrate.NewMemoryStore()
		now := time.Unix(1_700_000_000, 0)
		ctx := context.Background()
		for i := int64(0); i < abs(drainReq)%(2*rpm+1); i++ {
			_, _ = s.Admit(ctx, llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1 + abs(drainTok)%tpm, Now: now})
		}
		now = now.Add(time.Duration(gapMS) * time.Millisecond)
		before := s.Levels("k", "w", lim, lim, now)
		d, _ := s.Admit(ctx, llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: n, Now: now})
		after := s.Levels("k", "w", lim, lim, now)
		if !d.Allowed && before != after {
			t.Fatalf("refusal changed %v → %v", before, after)
		}
		if d.Allowed && (after[0] != before[0]-1 || after[1] != before[1]-n) {
			t.Fatalf("admission debited %v → %v for %d", before, after, n)
		}
	})
}

func abs(v int64) int64 {
	if v < 0 {
		if v == -1<<63 {
			return 1<<63 - 1
		}
		return -v
	}
	return v
}
