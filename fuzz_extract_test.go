package llmrate_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
