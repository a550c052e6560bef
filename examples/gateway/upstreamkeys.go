package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"go.uber.org/zap"
)

// UpstreamConfig is the config file's "upstream" section: the gateway's
// own provider keys, each held to the provider's figures for it, tried in
// order, failing over on a provider 429 (package upstream):
//
//	"upstream": {
//	  "keys": [
//	    {"name": "primary", "requestsPerMin": 500, "tokensPerMin": 200000, "secretEnv": "OPENAI_KEY_1"},
//	    {"name": "spare",   "requestsPerMin": 500, "tokensPerMin": 200000, "secretEnv": "OPENAI_KEY_2"}
//	  ],
//	  "maxAttempts": 3
//	}
//
// A key's credential comes from the environment variable secretEnv, or
// "secret" inline (for the built-in mock only: never put a real key in a
// file). Without -upstream the keys go to the built-in mock provider, which
// answers 429 (Retry-After: 30) to every credential starting "mock-429":
// see upstream-keys.json.
type UpstreamConfig struct {
	Keys        []UpstreamKey `json:"keys"`
	MaxAttempts int           `json:"maxAttempts"` // 0: upstream.DefaultMaxAttempts
}

// UpstreamKey is one provider key of the "upstream" section.
//
// A key may add the provider's other published limits as "windows"
// (llmrate.Limits.Windows), e.g. an Anthropic key's input and output
// tokens per minute, or a Gemini free-tier key's requests per day:
//
//	{"name": "claude", "requestsPerMin": 50, "tokensPerMin": 38000,
//	 "windows": [{"seconds": 60, "inputTokens": 30000, "outputTokens": 8000}], "secretEnv": "ANTHROPIC_KEY"}
type UpstreamKey struct {
	Name           string          `json:"name"`
	RequestsPerMin int64           `json:"requestsPerMin"`
	TokensPerMin   int64           `json:"tokensPerMin"`
	Windows        []WindowFigures `json:"windows"`
	SecretEnv      string          `json:"secretEnv"`
	Secret         string          `json:"secret"`
}

// mock429Prefix marks the credentials the built-in mock refuses with 429.
const mock429Prefix = "mock-429"

// upstreamProxy returns the handler that proxies to the provider at target
// (the built-in mock when ""), sending each request on the first of the
// configured keys with room, and a function, for after the server has shut
// down, that waits (up to 5 s) for the keys' reconciles still being retried
// and stops the mock. store holds the keys' buckets (nil: per-process
// memory).
func upstreamProxy(c *UpstreamConfig, target string, store llmrate.Store, mock *mockProvider, log *zap.Logger) (http.Handler, func(), error) {
	keys, err := upstreamKeys(c.Keys, target == "")
	if err != nil {
		return nil, nil, err
	}
	opts := []upstream.Option{upstream.WithLogger(log)}
	if store != nil {
		opts = append(opts, upstream.WithStore(store))
	}
	if c.MaxAttempts != 0 {
		opts = append(opts, upstream.WithMaxAttempts(c.MaxAttempts))
	}
	tr, err := upstream.New(keys, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream keys: %w", err)
	}
	stopMock := func() {}
	if target == "" {
		if target, stopMock, err = serveMock(mock); err != nil {
			return nil, nil, err
		}
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Close(ctx); err != nil {
			log.Warn("upstream keys: reconciles not applied at shutdown", zap.Error(err))
		}
		stopMock()
	}
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		stop()
		return nil, nil, fmt.Errorf("-upstream %q: want an absolute URL like https://api.openai.com", target)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	log.Info("upstream keys", zap.Strings("keys", names), zap.String("provider", target))
	return &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, // the Transport drops the client's credential
		Transport:     tr,
		FlushInterval: -1,
	}, stop, nil
}

// upstreamKeys builds the keys; an inline secret is accepted for the mock
// only.
func upstreamKeys(cfg []UpstreamKey, mock bool) ([]upstream.Key, error) {
	keys := make([]upstream.Key, 0, len(cfg))
	for _, k := range cfg {
		secret := k.Secret
		switch {
		case k.SecretEnv != "" && secret != "":
			return nil, fmt.Errorf("upstream key %q: give secretEnv or secret, not both", k.Name)
		case k.SecretEnv != "":
			if secret = os.Getenv(k.SecretEnv); secret == "" {
				return nil, fmt.Errorf("upstream key %q: $%s is empty", k.Name, k.SecretEnv)
			}
		case secret == "":
			return nil, fmt.Errorf("upstream key %q: no secretEnv", k.Name)
		case !mock:
			return nil, fmt.Errorf("upstream key %q: an inline secret is for the built-in mock only; use secretEnv", k.Name)
		}
		ws, err := windows(k.Windows)
		if err != nil {
			return nil, fmt.Errorf("upstream key %q: %w", k.Name, err)
		}
		keys = append(keys, upstream.Key{
			Name:      k.Name,
			Limits:    llmrate.Limits{RequestsPerMinute: k.RequestsPerMin, TokensPerMinute: k.TokensPerMin, Windows: ws},
			Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret) },
		})
	}
	return keys, nil
}

// serveMock serves the mock provider on a loopback port of its own, so the
// keys' requests reach it over HTTP as they would a real provider.
func serveMock(m *mockProvider) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mock := *m
	mock.refuse429Prefix = mock429Prefix
	srv := &http.Server{Handler: &mock, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ErrServerClosed once stopped
	}()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
