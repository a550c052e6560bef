package upstream_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
)

// printer prints each key's outcome.
type printer struct{}

func (printer) Attempted(e upstream.AttemptEvent) { fmt.Println(e.Key, e.Outcome) }
func (printer) Reconciled(e upstream.ReconcileEvent) {
	fmt.Println(e.Key, "charged", e.Actual, "tokens:", e.Kind)
}

// A reverse proxy in front of a provider with two keys: the first is out
// of room at the provider (429), so the request goes to the second, which is
// charged the usage its response reported. The first keeps its attempt's
// estimate (the body's 67 bytes / 4): the provider counted the request too.
func Example() {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") == "Bearer sk-first" {
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"Hello!"}}],"usage":{"prompt_tokens":12,"completion_tokens":3}}`)
	}))
	defer provider.Close()

	key := func(name, secret string) upstream.Key {
		return upstream.Key{
			Name:      name,
			Limits:    llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 30_000},
			Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret) },
		}
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t, err := upstream.New([]upstream.Key{key("first", "sk-first"), key("second", "sk-second")},
		upstream.WithObserver(printer{}), upstream.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	target, _ := url.Parse(provider.URL)
	gateway := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: t,
	})
	defer gateway.Close()

	resp, err := http.Post(gateway.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}`))
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// first provider_429
	// second admitted
	// first charged 16 tokens: estimated
	// second charged 15 tokens: usage
	// 200 {"choices":[{"message":{"content":"Hello!"}}],"usage":{"prompt_tokens":12,"completion_tokens":3}}
}
