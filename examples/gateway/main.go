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
// workspaces to tiers, and sets per-model limits, per-workspace overrides,
// shadow mode and the gateway's own provider keys (upstream-keys.json:
// several mock-provider keys, one of which the mock answers 429).
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
//	 "shadow": false,
//	 "upstream": {"keys": [{"name": "primary", "requestsPerMin": 500, "tokensPerMin": 200000, "secretEnv": "OPENAI_KEY_1"}]}}
//
// A key not listed is its own workspace; a workspace not listed is Free.
// "models" holds each model's (or model prefix's, ending in "*") own
// limits by tier name, "default" covering the tiers not listed; the model
// is read from the request body's "model" (or a Gemini path). "overrides"
// gives workspaces figures of their own instead of their tier's. "shadow":
// true counts, logs and reports every decision but refuses nothing.
// "upstream" lists the gateway's own provider keys (UpstreamConfig; try
// -config examples/gateway/upstream-keys.json).
//
// With "plans" (try -config examples/gateway/plans.json), the operator's
// own plans replace the tiers: "workspaces" name plans, "defaultPlan" is
// the plan of every other workspace, and each plan carries its own
// figures, windows (a monthly quota in a zone, a session) and "models"
// entries; "models" and "overrides" are not used beside it.
type Config struct {
	Keys        map[string]string             `json:"keys"`
	Workspaces  map[string]string             `json:"workspaces"`
	Plans       map[string]PlanFigures        `json:"plans"`
	DefaultPlan string                        `json:"defaultPlan"`
	Models      map[string]map[string]Figures `json:"models"`
	Overrides   map[string]Figures            `json:"overrides"`
	Shadow      bool                          `json:"shadow"`
	Upstream    *UpstreamConfig               `json:"upstream"`
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
	if len(c.Plans) > 0 {
		return c, tiers, nil // workspaces name plans (planOptions)
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

// gatewayFlags are the gateway's command-line flags.
type gatewayFlags struct {
	listen         string
	upstream       string
	upstreamKeyEnv string
	redisURL       string
	configPath     string
	logLevel       string
	mockWords      int
	mockDelay      time.Duration
	quiet          bool
	storeTimeout   time.Duration
	redisTimeout   time.Duration
	leases         float64
	hashKeyEnv     string
}

// parseFlags parses the gateway's command line.
func parseFlags(args []string) (*gatewayFlags, error) {
	var f gatewayFlags
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&f.upstream, "upstream", "", "proxy to this OpenAI-compatible provider URL instead of the built-in mock")
	fs.StringVar(&f.upstreamKeyEnv, "upstream-key-env", "UPSTREAM_API_KEY", "environment variable holding the provider key sent upstream (the client's key is replaced)")
	fs.StringVar(&f.redisURL, "redis", "", "share limits through this Redis URL (redis://host:port/db) instead of per-process memory")
	fs.StringVar(&f.configPath, "config", "", "JSON file: keys to workspaces, workspaces to tiers, model limits, overrides, shadow mode")
	fs.StringVar(&f.logLevel, "log-level", "info", "zap log level (debug shows refusals)")
	fs.IntVar(&f.mockWords, "mock-words", 20, "words in each mock answer")
	fs.DurationVar(&f.mockDelay, "mock-delay", 0, "pause between the mock's streamed chunks")
	fs.BoolVar(&f.quiet, "quiet", false, "do not print the curl examples")
	fs.DurationVar(&f.storeTimeout, "store-timeout", llmrate.DefaultStoreTimeout, "bound on each store call; past it the request fails open")
	fs.DurationVar(&f.redisTimeout, "redis-timeout", 30*time.Millisecond, "bound on each Redis call (keep it below -store-timeout)")
	fs.Float64Var(&f.leases, "leases", 0, "with -redis: take leases of this share (0 < share <= 0.25) of a busy key's capacity and admit against them locally (0: off)")
	fs.StringVar(&f.hashKeyEnv, "redis-hash-key-env", "LLMRATE_HASH_KEY", "environment variable holding the secret (at least 16 bytes, the same on every gateway) that keys the names in Redis; unset: a random one for this process alone, logged")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return &f, nil
}

// run runs the gateway until ctx is done. ready, if not nil, receives the
// listening address once the gateway accepts connections.
func run(ctx context.Context, args []string, stdout io.Writer, ready chan<- string) error {
	f, err := parseFlags(args)
	if err != nil {
		return err
	}
	log, err := newLogger(f.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	opts, cfg, err := limiterOptions(f, log)
	if err != nil {
		return err
	}
	keyStore, storeOpts, closeStore, err := storeOptions(ctx, f.redisURL, f.redisTimeout, f.leases, f.hashKeyEnv, log)
	if err != nil {
		return err
	}
	defer closeStore()
	opts = append(opts, storeOpts...)
	lim, err := llmrate.New(opts...)
	if err != nil {
		return err
	}

	mock := &mockProvider{words: f.mockWords, delay: f.mockDelay}
	provider := http.Handler(mock)
	switch {
	case cfg.Upstream != nil && len(cfg.Upstream.Keys) > 0:
		var stopMock func()
		if provider, stopMock, err = upstreamProxy(cfg.Upstream, f.upstream, keyStore, mock, log); err != nil {
			return err
		}
		defer stopMock()
	case f.upstream != "":
		if provider, err = reverseProxy(f.upstream, os.Getenv(f.upstreamKeyEnv)); err != nil {
			return err
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", lim.Middleware(provider))
	limits := lim.LimitsHandler(llmrate.ShowRemaining())
	mux.Handle("GET /platform/v1/limits", limits)
	mux.Handle("/platform/v1/limits", limits) // 405 for other methods
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	addr := ln.Addr().String()
	backend := "built-in mock provider"
	if f.upstream != "" {
		backend = f.upstream
	}
	storeName := "memory (per process)"
	if f.redisURL != "" {
		storeName = "redis (shared)"
	}
	log.Info("gateway listening", zap.String("addr", addr), zap.String("provider", backend), zap.String("store", storeName))
	if !f.quiet {
		printTry(stdout, addr, backend, storeName)
	}
	return serve(ctx, srv, ln, ready, lim, log)
}

// limiterOptions are the limiter's options from the flags and the config
// file, the store's aside.
func limiterOptions(f *gatewayFlags, log *zap.Logger) ([]llmrate.Option, *Config, error) {
	cfg, tiers, err := loadConfig(f.configPath)
	if err != nil {
		return nil, nil, err
	}
	opts := []llmrate.Option{
		llmrate.WithLogger(log),
		llmrate.WithStreamUsage(),
		llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI),
	}
	if len(cfg.Plans) == 0 {
		opts = append(opts, llmrate.WithTierResolver(tiers))
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
	policies, err := policyOptions(f.configPath, cfg)
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, policies...)
	opts = append(opts, llmrate.WithStoreTimeout(f.storeTimeout))
	return opts, cfg, nil
}

// printTry prints the curl commands that try the gateway at addr.
func printTry(stdout io.Writer, addr, backend, storeName string) {
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

// serve serves ln until ctx is done, then shuts srv down and closes lim
// (which applies the reconciles still queued and returns the store's
// leases). ready, if not nil, receives the listening address first.
func serve(ctx context.Context, srv *http.Server, ln net.Listener, ready chan<- string, lim *llmrate.Limiter, log *zap.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready <- ln.Addr().String()
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
	return lim.Close(sctx)
}

// newLogger returns a production zap logger on stderr at level.
func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, err
	}
	zc := zap.NewProductionConfig()
	zc.Level = lvl
	zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	return zc.Build()
}

// reverseProxy forwards to the provider at upstream, replacing the client's
// key by providerKey (none when "") and flushing streamed chunks at once.
func reverseProxy(upstream, providerKey string) (http.Handler, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("-upstream %q: want an absolute URL like https://api.openai.com", upstream)
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Header.Del("X-Api-Key")
			pr.Out.Header.Del("Authorization")
			if providerKey != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+providerKey)
			}
		},
		FlushInterval: -1,
	}, nil
}
