package llmrate_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/llmrate/llmrate"
)

// A fixed clock makes the examples deterministic; production uses time.Now.
var exampleNow = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

func exampleProvider() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":30}}`)
	})
}

func post(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini"}`))
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The Free tier admits a burst of 200 requests, then answers 429 with the
// exact wait.
func Example() {
	lim, err := llmrate.New(llmrate.WithClock(exampleNow))
	if err != nil {
		panic(err)
	}
	h := lim.Middleware(exampleProvider())
	admitted := 0
	for post(h, "sk-demo").Code == http.StatusOK {
		admitted++
	}
	w := post(h, "sk-demo")
	fmt.Println("admitted:", admitted)
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"))
	// Output:
	// admitted: 200
	// 429 Retry-After: 1
}

// Workspaces get their tier from a resolver; unknown ones are Free.
func ExampleWithTierResolver() {
	tiers := llmrate.StaticTiers{"sk-growth": llmrate.Growth}
	lim, _ := llmrate.New(llmrate.WithClock(exampleNow), llmrate.WithTierResolver(tiers))
	h := lim.LimitsHandler()
	for _, key := range []string{"sk-growth", "sk-unknown"} {
		r := httptest.NewRequest(http.MethodGet, "/platform/v1/limits", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Body.String(), "\n")
	}
	// Output:
	// {"tier":"growth","requestsPerMin":5000,"tokensPerMin":10000000}
	// {"tier":"free","requestsPerMin":100,"tokensPerMin":200000}
}

// Many keys can share one workspace's allowance.
func ExampleWithWorkspace() {
	org := map[string]string{"sk-alice": "acme", "sk-bob": "acme"}
	lim, _ := llmrate.New(llmrate.WithClock(exampleNow), llmrate.WithWorkspace(func(r *http.Request) (string, error) {
		key, err := llmrate.BearerToken()(r)
		return org[key], err
	}))
	h := lim.Middleware(exampleProvider())
	admitted := 0
	for i := 0; ; i++ {
		if post(h, []string{"sk-alice", "sk-bob"}[i%2]).Code != http.StatusOK {
			break
		}
		admitted++
	}
	fmt.Println("acme admitted:", admitted)
	// Output:
	// acme admitted: 200
}

// OpenAI-style rate-limit headers describe the binding bucket.
func ExampleWithRateLimitHeaders() {
	lim, _ := llmrate.New(llmrate.WithClock(exampleNow), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
	w := post(lim.Middleware(exampleProvider()), "sk-demo")
	for _, h := range []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Remaining-Tokens"} {
		fmt.Printf("%s: %s\n", h, w.Header().Get(h))
	}
	// Output:
	// X-Ratelimit-Limit-Requests: 200
	// X-Ratelimit-Remaining-Requests: 199
	// X-Ratelimit-Reset-Requests: 600ms
	// X-Ratelimit-Remaining-Tokens: 399995
}

// An Observer sees every decision; here, a refusal's bucket and wait.
func ExampleWithObserver() {
	obs := &printObserver{}
	lim, _ := llmrate.New(llmrate.WithClock(exampleNow), llmrate.WithObserver(obs))
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.ContentLength = 4 * 500_000 // 500,000 tokens: more than Free's whole bucket
	r.Header.Set("Authorization", "Bearer sk-demo")
	lim.Middleware(exampleProvider()).ServeHTTP(httptest.NewRecorder(), r)
	// Output:
	// refused by key_tokens, retry after 1m0s, never fits: true
}

type printObserver struct{}

func (printObserver) Decided(e llmrate.DecisionEvent) {
	if !e.Allowed {
		fmt.Printf("refused by %s, retry after %v, never fits: %v\n", e.Refused, e.RetryAfter, e.NeverFits)
	}
}
func (printObserver) Reconciled(llmrate.ReconcileEvent) {}
func (printObserver) FailedOpen(llmrate.FailOpenEvent)  {}
func (printObserver) Evicted()                          {}

// perTier gives every tier the same figures (an example's shorthand).
func perTier(rpm, tpm int64) llmrate.TierTable {
	l := llmrate.Limits{RequestsPerMinute: rpm, TokensPerMinute: tpm}
	return llmrate.TierTable{Free: l, Developer: l, Team: l, Growth: l, Scale: l, Enterprise: l}
}

// Every gpt-4o-mini snapshot shares one per-model limit, apart from the
// key's default buckets; the 429 names the entry.
func ExampleWithModelLimits() {
	lim, _ := llmrate.New(llmrate.WithClock(exampleNow),
		llmrate.WithModel(llmrate.ModelFromBody()),
		llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o-mini*": perTier(3, 100_000)}))
	h := lim.Middleware(exampleProvider())
	admitted := 0
	for post(h, "sk-demo").Code == http.StatusOK { // posts {"model":"gpt-4o-mini"}
		admitted++
	}
	fmt.Println("gpt-4o-mini admitted:", admitted)
	w := post(h, "sk-demo")
	fmt.Println(w.Code, strings.SplitN(w.Body.String(), ":", 4)[2])
	// Output:
	// gpt-4o-mini admitted: 6
	// 429 "Rate limit reached for gpt-4o-mini* for this API key on requests per minute on the free tier
}

// Shadow mode decides and reports but refuses nothing.
func ExampleWithShadow() {
	lim, _ := llmrate.New(llmrate.WithClock(exampleNow), llmrate.WithShadow(), llmrate.WithTiers(perTier(1, 1000)))
	h := lim.Middleware(exampleProvider())
	var codes []int
	for range 4 {
		codes = append(codes, post(h, "sk-demo").Code)
	}
	fmt.Println(codes, "would have refused:", lim.ShadowRefusals())
	// Output:
	// [200 200 200 200] would have refused: 2
}
