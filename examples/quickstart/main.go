// Command quickstart is the README's example, verbatim (docs_test.go keeps
// the two equal): llmrate on a standard library ServeMux in front of an
// OpenAI-compatible upstream.
package main

import (
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"

	"github.com/llmrate/llmrate"
)

func newHandler(upstream *url.URL, providerKey string) (http.Handler, error) {
	lim, err := llmrate.New(
		llmrate.WithTierResolver(llmrate.StaticTiers{"sk-acme": llmrate.Growth}), // the rest: Free
		llmrate.WithEstimator(llmrate.EstimateFromBody()),                        // prompt + max_tokens up front
		llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI),                      // x-ratelimit-* for the caller
	)
	if err != nil {
		return nil, err // a *llmrate.ConfigError naming the bad option
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(upstream)
		pr.Out.Header.Del("X-Api-Key")                            // the caller's key stays here;
		pr.Out.Header.Set("Authorization", "Bearer "+providerKey) // the provider gets yours
	}}
	mux := http.NewServeMux()
	mux.Handle("/v1/", lim.Middleware(proxy)) // 429 before the provider is contacted
	mux.Handle("GET /platform/v1/limits", lim.LimitsHandler())
	return mux, nil
}

func main() {
	upstream, _ := url.Parse("https://api.openai.com")
	h, err := newHandler(upstream, os.Getenv("OPENAI_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", h))
}
