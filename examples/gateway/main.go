// Command gateway is a working LLM API gateway with llmrate in front:
//
//	go run ./examples/gateway
//
// starts it on 127.0.0.1:8080 in front of a built-in mock OpenAI-compatible
// provider (JSON and SSE responses with usage). With no config, any bearer
// key is its own workspace on the Free tier, so the 201st quick request of
// one key gets the 429. -upstream URL proxies to a real provider instead,
// -redis URL shares one limit across gateway processes (each with the same
// secret in $LLMRATE_HASH_KEY), -config FILE maps keys to workspaces and
// workspaces to tiers, and sets per-model limits, per-workspace overrides
// and shadow mode.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/llmrate/llmrate"
	"go.uber.org/zap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// Config is the -config file (JSON):
//
//	{"keys": {"sk-alice": "acme", "sk-bob": "acme"},
//	 "workspaces": {"acme": "growth", "bigco": "enterprise"},
//	 "models": {"gpt-4o*": {"default": {"requestsPerMin": 500, "tokensPerMin": 30000},
//	                        "growth": {"requestsPerMin": 5000, "tokensPerMin": 800000}},
//	            "o3": {"default": {"requestsPerMin": 20, "tokensPerMin": 40000}}},
//	 "overrides": {"bigco": {"requestsPerMin": 60000, "tokensPerMin": 150000000}},
//	 "shadow": false}
//
// A key not listed is its own workspace; a workspace not listed is Free.
// "models" holds each model's (or model prefix's, ending in "*") own
// limits by tier name, "default" covering the tiers not listed; the model
// is read from the request body's "model" (or a Gemini path). "overrides"
// gives workspaces figures of their own instead of their tier's. "shadow":
// true counts, logs and reports every decision but refuses nothing.
type Config struct {
	Keys       map[string]string             `json:"keys"`
	Workspaces map[string]string             `json:"workspaces"`
	Models     map[string]map[string]Figures `json:"models"`
	Overrides  map[string]Figures            `json:"overrides"`
	Shadow     bool                          `json:"shadow"`
}

func loadConfig(path string) (*Config, llmrate.StaticTiers, error) {
	c := &Config{}
	tiers := llmrate.StaticTiers{}
	if path == "" {
		return c, tiers, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	for ws, name := range c.Workspaces {
		t, err := llmrate.ParseTier(name)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: workspace %q: %w", path, ws, err)
		}
		tiers[ws] = t
	}
	return c, tiers, nil
}

// run runs the gateway until ctx is done. ready, if not nil, receives the
// listening address once the gateway accepts connections.
func run(ctx context.Context, args []string, stdout io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	upstream := fs.String("upstream", "", "proxy to this OpenAI-compatible provider URL instead of the built-in mock")
	upstreamKeyEnv := fs.String("upstream-key-env", "UPSTREAM_API_KEY", "environment variable holding the provider key sent upstream (the client's key is replaced)")
	redisURL := fs.String("redis", "", "share limits through this Redis URL (redis://host:port/db) instead of per-process memory")
	configPath := fs.String("config", "", "JSON file: keys to workspaces, workspaces to tiers, model limits, overrides, shadow mode")
	logLevel := fs.String("log-level", "info", "zap log level (debug shows refusals)")
	mockWords := fs.Int("mock-words", 20, "words in each mock answer")
	mockDelay := fs.Duration("mock-delay", 0, "pause between the mock's streamed chunks")
	quiet := fs.Bool("quiet", false, "do not print the curl examples")
	storeTimeout := fs.Duration("store-timeout", llmrate.DefaultStoreTimeout, "bound on each store call; past it the request fails open")
	redisTimeout := fs.Duration("redis-timeout", 30*time.Millisecond, "bound on each Redis call (keep it below -store-timeout)")
	leases := fs.Float64("leases", 0, "with -redis: take leases of this share (0 < share <= 0.25) of a busy key's capacity and admit against them locally (0: off)")
	hashKeyEnv := fs.String("redis-hash-key-env", "LLMRATE_HASH_KEY", "environment variable holding the secret (at least 16 bytes, the same on every gateway) that keys the names in Redis; unset: a random one for this process alone, logged")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	lvl, err := zap.ParseAtomicLevel(*logLevel)
	if err != nil {
		return err
	}
	zc := zap.NewProductionConfig()
	zc.Level = lvl
	zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	log, err := zc.Build()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	cfg, tiers, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	opts := []llmrate.Option{
		llmrate.WithLogger(log),
		llmrate.WithTierResolver(tiers),
		llmrate.WithStreamUsage(),
		llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI),
	}
	if len(cfg.Keys) > 0 {
		keys := cfg.Keys
		opts = append(opts, llmrate.WithWorkspace(func(r *http.Request) (string, error) {
			k, err := llmrate.BearerToken()(r)
			if err != nil {
				return "", err
			}
			if ws, ok := keys[k]; ok {
				return ws, nil
			}
			return k, nil
		}))
	}
	policies, err := policyOptions(*configPath, cfg)
	if err != nil {
		return err
	}
	opts = append(opts, policies...)
	opts = append(opts, llmrate.WithStoreTimeout(*storeTimeout))
	storeOpts, closeStore, err := storeOptions(ctx, *redisURL, *redisTimeout, *leases, *hashKeyEnv, log)
	if err != nil {
		return err
	}
	defer closeStore()
	opts = append(opts, storeOpts...)
	lim, err := llmrate.New(opts...)
	if err != nil {
		return err
	}

	var provider http.Handler
	if *upstream == "" {
		provider = &mockProvider{words: *mockWords, delay: *mockDelay}
	} else {
		u, err := url.Parse(*upstream)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("-upstream %q: want an absolute URL like https://api.openai.com", *upstream)
		}
		providerKey := os.Getenv(*upstreamKeyEnv)
		provider = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(u)
				pr.Out.Header.Del("X-Api-Key")
				pr.Out.Header.Del("Authorization")
				if providerKey != "" {
					pr.Out.Header.Set("Authorization", "Bearer "+providerKey)
				}
			},
			FlushInterval: -1,
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", lim.Middleware(provider))
	mux.Handle("GET /platform/v1/limits", lim.LimitsHandler())
	mux.Handle("/platform/v1/limits", lim.LimitsHandler()) // 405 for other methods
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	addr := ln.Addr().String()
	backend := "built-in mock provider"
	if *upstream != "" {
		backend = *upstream
	}
	storeName := "memory (per process)"
	if *redisURL != "" {
		storeName = "redis (shared)"
	}
	log.Info("gateway listening", zap.String("addr", addr), zap.String("provider", backend), zap.String("store", storeName))
	if !*quiet {
		fmt.Fprintf(stdout, `llmrate gateway on http://%[1]s in front of the %[2]s (store: %[3]s)

Try:
  curl -s http://%[1]s/v1/chat/completions -H 'Authorization: Bearer sk-demo' -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
  curl -sN http://%[1]s/v1/chat/completions -H 'Authorization: Bearer sk-demo' -d '{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}'
  curl -s http://%[1]s/platform/v1/limits -H 'Authorization: Bearer sk-demo'
  seq 210 | xargs -P 16 -I@ curl -s -o /dev/null -w '%%{http_code}\n' http://%[1]s/v1/chat/completions -H 'Authorization: Bearer sk-burst' -d '{"model":"m"}' | sort | uniq -c
    (Free tier: a burst of 200 is admitted, then 429 with Retry-After; the bucket
     refills one request every 0.6 s, so a slower loop sees a few more admitted)

`, addr, backend, storeName)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready <- addr
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// Apply the reconciles still queued and return the store's leases.
	return lim.Close(sctx)
}
