// Command reverseproxy puts llmrate in front of an OpenAI-compatible
// upstream through httputil.ReverseProxy. Clients send their gateway key;
// the upstream gets the operator's provider key. Streaming requests get
// usage reported (WithStreamUsage) so tokens reconcile exactly.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"

	"github.com/llmrate/llmrate"
)

func newProxy(upstream *url.URL, providerKey string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Header.Del("X-Api-Key")
			pr.Out.Header.Set("Authorization", "Bearer "+providerKey)
		},
		FlushInterval: -1, // pass SSE events through as they come
	}
}

func newHandler(upstream *url.URL, providerKey string, opts ...llmrate.Option) (http.Handler, error) {
	lim, err := llmrate.New(append([]llmrate.Option{llmrate.WithStreamUsage(), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI)}, opts...)...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", lim.Middleware(newProxy(upstream, providerKey)))
	mux.Handle("/platform/v1/limits", lim.LimitsHandler())
	return mux, nil
}

func main() {
	up := flag.String("upstream", "https://api.openai.com", "OpenAI-compatible provider")
	flag.Parse()
	u, err := url.Parse(*up)
	if err != nil {
		log.Fatal(err)
	}
	h, err := newHandler(u, os.Getenv("OPENAI_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", h))
}
