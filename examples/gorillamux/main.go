// Command gorillamux shows llmrate as gorilla/mux middleware.
package main

import (
	"io"
	"log"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/llmrate/llmrate"
)

func newRouter(lim *llmrate.Limiter) http.Handler {
	r := mux.NewRouter()
	r.Handle("/platform/v1/limits", lim.LimitsHandler())
	api := r.PathPrefix("/v1").Subrouter()
	api.Use(lim.Middleware)
	api.HandleFunc("/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":5,"completion_tokens":7}}`)
	}).Methods(http.MethodPost)
	return r
}

func main() {
	lim, err := llmrate.New()
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", newRouter(lim)))
}
