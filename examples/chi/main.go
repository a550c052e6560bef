// Command chi shows llmrate as chi middleware.
package main

import (
	"io"
	"log"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/llmrate/llmrate"
)

func newRouter(lim *llmrate.Limiter) http.Handler {
	r := chi.NewRouter()
	r.Get("/platform/v1/limits", lim.LimitsHandler().ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(lim.Middleware)
		r.Post("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":5,"completion_tokens":7}}`)
		})
	})
	return r
}

func main() {
	lim, err := llmrate.New(llmrate.WithTierResolver(llmrate.StaticTiers{"sk-team": llmrate.Team}))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", newRouter(lim)))
}
