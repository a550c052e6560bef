// Command stdlib shows llmrate on a standard library ServeMux.
package main

import (
	"io"
	"log"
	"net/http"

	"github.com/llmrate/llmrate"
)

// provider stands in for your LLM provider or proxy.
var provider = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30}}`)
})

func newMux(lim *llmrate.Limiter) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", lim.Middleware(provider))
	mux.Handle("/platform/v1/limits", lim.LimitsHandler())
	return mux
}

func main() {
	lim, err := llmrate.New() // Free tier for every key, per-process memory
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", newMux(lim)))
}
