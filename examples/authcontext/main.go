// Command authcontext takes the workspace from a context value set by an
// authentication middleware that runs first: the client cannot pick its own
// workspace, because only the auth layer writes it.
package main

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"

	"github.com/llmrate/llmrate"
)

type ctxKey struct{}

// accounts is what your auth layer knows: key → organisation.
var accounts = map[string]string{"sk-alice": "acme", "sk-bob": "acme", "sk-carol": "globex"}

// authenticate verifies the key and stores the caller's workspace.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := llmrate.BearerToken()(r)
		org, ok := accounts[key]
		if err != nil || !ok {
			http.Error(w, `{"error":{"message":"invalid API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, org)))
	})
}

func workspaceFromContext(r *http.Request) (string, error) {
	if ws, ok := r.Context().Value(ctxKey{}).(string); ok && ws != "" {
		return ws, nil
	}
	return "", errors.New("no workspace in context: is authenticate in front?")
}

func newHandler(opts ...llmrate.Option) (http.Handler, error) {
	lim, err := llmrate.New(append([]llmrate.Option{
		llmrate.WithWorkspace(workspaceFromContext),
		llmrate.WithTierResolver(llmrate.StaticTiers{"acme": llmrate.Growth}),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	return authenticate(lim.Middleware(provider)), nil
}

func main() {
	h, err := newHandler()
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", h))
}
