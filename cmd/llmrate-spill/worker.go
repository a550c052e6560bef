package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// Modes: how a worker's store is configured.
const (
	modePlain  = "plain"  // redisstore, one call per admission
	modeBatch  = "batch"  // redisstore with WithBatching
	modeLease  = "lease"  // redisstore with WithLeases
	modeMemory = "memory" // a MemoryStore per process: the control, which must show spillover
)

// workerConfig is what the coordinator passes to each worker process.
type workerConfig struct {
	ID            int
	Redis         string // the proxy's address
	HashKey       string // hex, the same for every worker
	Key           string // the one API key every client sends
	Mode          string
	Share         float64 // WithLeases
	Batch         int     // WithBatching
	Fallback      bool    // WithFallbackLocal
	RedisTimeout  time.Duration
	StoreTimeout  time.Duration
	RetryInterval time.Duration
	MaxRetries    int
	CtxTimeout    bool
	Clients       int
	Duration      time.Duration
	Think         time.Duration
	RPM, TPM      int64
	Estimate      int64 // tokens: each request's body is 4 × Estimate bytes
	MinActual     int64 // each response reports usage in [MinActual, Estimate]
	Seed          uint64
	DayRequests   int64 // a daily window on the key (window.go); 0: none
	MonthRequests int64 // a calendar month window on the key (window.go); 0: none
}

// workerResult is what a worker reports, as one JSON line.
type workerResult struct {
	ID       int   `json:"id"`
	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"` // the handler ran: the request passed, whoever decided it
	Refused  int64 `json:"refused"`  // 429
	Other    int64 `json:"other"`    // any other status: a harness error
	// RefusedBy counts refusals by the bucket that refused, indexed by
	// llmrate.Bucket (a solo key's refusals name its key buckets).
	RefusedBy [4]int64 `json:"refused_by"`
	TokensRep int64    `json:"tokens_reported"`

	// How the admissions that passed were decided. FailOpenAdmit counts
	// the limiter's fail-opens on admission (observer, Op "admit");
	// FailOpens is Limiter.FailOpens, reconciles included.
	FailOpenAdmit     int64 `json:"fail_open_admit"`
	FailOpenReconcile int64 `json:"fail_open_reconcile"`
	FailOpens         int64 `json:"fail_opens"`
	RedisDecided      int64 `json:"redis_decided"`
	RedisAllowed      int64 `json:"redis_allowed"`
	LeaseLocal        int64 `json:"lease_local"`
	FallbackDecided   int64 `json:"fallback_decided"`
	FallbackAllowed   int64 `json:"fallback_allowed"`
	StoreErrors       int64 `json:"store_errors"` // Admit calls that returned an error (the limiter failed open)
	RedisErrors       int64 `json:"redis_errors"` // redisstore's Errors()
	Hedges            int64 `json:"hedges"`       // redisstore's Hedges()
	Resends           int64 `json:"resends"`      // redisstore's Resends()
	ChargesSent       int64 `json:"charges_sent"` // redisstore's Charges(), after Close
	ChargesLost       int64 `json:"charges_lost"`

	// Reconciles the limiter sent to the store, by where they landed, and
	// their token deltas (actual − estimate: ≤ 0 here).
	Reconciles        int64 `json:"reconciles"`
	ReconcileShared   int64 `json:"reconcile_shared"` // applied in Redis (or to a lease)
	ReconcileFallback int64 `json:"reconcile_fallback"`
	ReconcileFailed   int64 `json:"reconcile_failed"`
	DeltaShared       int64 `json:"delta_shared"`
	DeltaFallback     int64 `json:"delta_fallback"`
	DeltaFailed       int64 `json:"delta_failed"`

	// Unexplained counts decisions the attribution could not explain (see
	// countingStore): 0 unless it is wrong.
	Unexplained int64 `json:"unexplained"`
	// CommandErrors counts the commands go-redis saw fail, by command and
	// error (NOSCRIPT aside), over the run: what the store's Redis errors
	// and resends were made of.
	CommandErrors map[string]int64 `json:"command_errors,omitempty"`

	CloseError string `json:"close_error,omitempty"`
}

// runWorker is a worker process: it builds a limiter on one Redis (through
// the proxy), says "ready", waits for "go" on stdin, sends requests from
// cfg.Clients goroutines for cfg.Duration, says "stopped", closes the
// limiter (applying what reconciles are queued) and prints "result " and
// its JSON.
func runWorker(arg string, stdin io.Reader, stdout io.Writer) error {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	w, err := newWorker(cfg)
	if err != nil {
		return err
	}
	defer w.shutdown()
	fmt.Fprintln(stdout, "ready")
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err == nil {
		err = w.start(strings.TrimSpace(line))
	}
	if err != nil {
		return fmt.Errorf("worker %d: waiting for go: %q, %v", cfg.ID, line, err)
	}
	w.load()
	fmt.Fprintln(stdout, "stopped")
	res := w.finish()
	b, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "result %s\n", b)
	return nil
}

type worker struct {
	cfg    workerConfig
	client *redis.Client
	store  *redisstore.Store // nil in memory mode
	probe  *probe
	lim    *llmrate.Limiter
	h      http.Handler
	obs    observer
	res    workerResult
	closed bool

	offset atomic.Int64 // added to real time by now: set by "go <ns>" (the month scenario)

	errorsBefore                int64 // the store's Errors() when the clock started
	chargesBefore, lostBefore   int64 // and its Charges(): the warm-up's admissions carry no ID, so one the fallback allowed is counted lost
	hedgesBefore, resendsBefore int64 // and its Hedges() and Resends()
}

func newWorker(cfg workerConfig) (*worker, error) {
	w := &worker{cfg: cfg, res: workerResult{ID: cfg.ID}}
	figures := llmrate.Limits{RequestsPerMinute: cfg.RPM, TokensPerMinute: cfg.TPM, Windows: append(dayWindows(cfg.DayRequests), monthWindows(cfg.MonthRequests)...)}
	opts := []llmrate.Option{
		llmrate.WithTiers(llmrate.TierTable{Free: figures, Developer: figures, Team: figures, Growth: figures, Scale: figures, Enterprise: figures}),
		llmrate.WithObserver(&w.obs),
	}
	if cfg.StoreTimeout > 0 {
		opts = append(opts, llmrate.WithStoreTimeout(cfg.StoreTimeout))
	}
	if cfg.MonthRequests > 0 {
		opts = append(opts, llmrate.WithClock(w.now))
	}
	if cfg.Mode != modeMemory {
		secret, err := hex.DecodeString(cfg.HashKey)
		if err != nil {
			return nil, fmt.Errorf("hash key: %w", err)
		}
		// docs/redis.md's client, with the context deadlines redisstore asks
		// for (HonoursContext).
		w.client = redis.NewClient(&redis.Options{Addr: cfg.Redis, MaxRetries: cfg.MaxRetries, ContextTimeoutEnabled: cfg.CtxTimeout})
		w.probe = newProbe(cfg.Mode)
		w.client.AddHook(w.probe)
		sopts := []redisstore.Option{redisstore.WithHashKey(secret)}
		if cfg.MonthRequests > 0 {
			// The store's clock stands for the server's: real time plus the
			// offset "go" brings, shared by every worker.
			sopts = append(sopts, redisstore.WithClock(w.now))
		}
		if cfg.RedisTimeout > 0 {
			sopts = append(sopts, redisstore.WithTimeout(cfg.RedisTimeout))
		}
		if cfg.RetryInterval > 0 {
			sopts = append(sopts, redisstore.WithRetryInterval(cfg.RetryInterval))
		}
		if cfg.Fallback {
			sopts = append(sopts, redisstore.WithFallbackLocal())
		}
		switch cfg.Mode {
		case modeBatch:
			sopts = append(sopts, redisstore.WithBatching(cfg.Batch))
		case modeLease:
			sopts = append(sopts, redisstore.WithLeases(cfg.Share))
		case modePlain:
		default:
			return nil, fmt.Errorf("unknown mode %q", cfg.Mode)
		}
		s, err := redisstore.New(w.client, sopts...)
		if err != nil {
			_ = w.client.Close()
			return nil, err
		}
		w.store = s
		opts = append(opts, llmrate.WithStore(&countingStore{s: s, w: w}))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.client.Ping(ctx).Err(); err != nil {
			_ = w.client.Close()
			return nil, fmt.Errorf("worker %d: redis through the proxy: %w", cfg.ID, err)
		}
	}
	if w.store != nil {
		w.warm(figures)
	}
	lim, err := llmrate.New(opts...)
	if err != nil {
		if w.client != nil {
			_ = w.client.Close()
		}
		return nil, err
	}
	w.lim = lim
	w.h = lim.Middleware(http.HandlerFunc(w.serve))
	return w, nil
}

// warm fills the client's connection pool and has Redis load the scripts,
// as in a gateway that has been running for a while: each client admits
// and reconciles once, on a key of its own, before the clock starts. A
// round in which a Redis call failed (the machine may be slow) is repeated
// once the store would try Redis again, up to five rounds; after that the
// run starts all the same, with a warning (the failures are Redis's, not
// the harness's). The tallies start afresh after it; Redis errors meanwhile are left out of RedisErrors.
func (w *worker) warm(figures llmrate.Limits) {
	retry := w.cfg.RetryInterval
	if retry <= 0 {
		retry = redisstore.DefaultRetryInterval
	}
	for round := 1; ; round++ {
		before := w.store.Errors()
		err := w.warmOnce(figures)
		failed := w.store.Errors() - before
		if err == nil && failed == 0 {
			break
		}
		time.Sleep(retry + 50*time.Millisecond) // the breaker may be open
		if round == 5 {
			fmt.Fprintf(os.Stderr, "llmrate-spill worker %d: warming up: %d Redis calls failed in round %d (%v); starting all the same\n", w.cfg.ID, failed, round, err)
			break
		}
	}
	w.probe.reset()
	w.errorsBefore = w.store.Errors()
	w.chargesBefore, w.lostBefore = w.store.Charges()
	w.hedgesBefore, w.resendsBefore = w.store.Hedges(), w.store.Resends()
}

func (w *worker) warmOnce(figures llmrate.Limits) error {
	var wg sync.WaitGroup
	errs := make([]error, w.cfg.Clients)
	for g := range w.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			key := fmt.Sprintf("warm-%d-%d", w.cfg.ID, g)
			ar := llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: figures, WorkspaceLimits: figures, Tokens: 1, Solo: true, Now: time.Now()}
			if _, err := w.store.Admit(ctx, ar); err != nil {
				errs[g] = err
				return
			}
			errs[g] = w.store.Reconcile(ctx, llmrate.ReconcileRequest{Key: key, Workspace: key, KeyLimits: figures, WorkspaceLimits: figures,
				Estimate: 1, Actual: 2, Solo: true, Now: time.Now()})
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// serve is the provider: it answers with a chat completion whose usage the
// request's header chose, which the limiter reads and reconciles.
func (w *worker) serve(rw http.ResponseWriter, r *http.Request) {
	actual, _ := strconv.ParseInt(r.Header.Get("X-Spill-Actual"), 10, 64)
	atomic.AddInt64(&w.res.Admitted, 1)
	atomic.AddInt64(&w.res.TokensRep, actual)
	in := actual / 2
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, `{"id":"chatcmpl-spill","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, in, actual-in, actual)
}

// load runs the clients until the duration is over.
func (w *worker) load() {
	deadline := time.Now().Add(w.cfg.Duration)
	body := bytes.Repeat([]byte("x"), int(4*w.cfg.Estimate))
	var wg sync.WaitGroup
	for g := range w.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.ID)<<32|uint64(g)))
			rec := &recorder{h: http.Header{}}
			for time.Now().Before(deadline) {
				actual := w.cfg.MinActual + rng.Int64N(w.cfg.Estimate-w.cfg.MinActual+1)
				req, _ := http.NewRequest(http.MethodPost, "http://gateway/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+w.cfg.Key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Spill-Actual", strconv.FormatInt(actual, 10))
				rec.reset()
				w.h.ServeHTTP(rec, req)
				atomic.AddInt64(&w.res.Requests, 1)
				switch rec.status() {
				case http.StatusOK:
				case http.StatusTooManyRequests:
					atomic.AddInt64(&w.res.Refused, 1)
				default:
					atomic.AddInt64(&w.res.Other, 1)
				}
				if w.cfg.Think > 0 {
					time.Sleep(w.cfg.Think)
				}
			}
		}()
	}
	wg.Wait()
}

// finish closes the limiter (its queued reconciles are applied, leases
// returned) and returns the tallies.
func (w *worker) finish() workerResult {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := w.lim.Close(ctx); err != nil {
		w.res.CloseError = err.Error()
	}
	w.closed = true
	r := w.res
	r.FailOpens = w.lim.FailOpens()
	r.FailOpenAdmit = w.obs.failOpenAdmit.Load()
	r.FailOpenReconcile = w.obs.failOpenReconcile.Load()
	for b := range r.RefusedBy {
		r.RefusedBy[b] = w.obs.refusedBy[b].Load()
	}
	if p := w.probe; p != nil {
		p.mu.Lock()
		r.RedisDecided, r.RedisAllowed = p.t.redisDecided, p.t.redisAllowed
		r.LeaseLocal = p.t.leaseLocal
		r.FallbackDecided, r.FallbackAllowed = p.t.fallbackDecided, p.t.fallbackAllowed
		r.Unexplained = p.t.unexplained
		r.CommandErrors = p.t.cmdErrors
		r.StoreErrors = p.t.storeErrors
		r.Reconciles, r.ReconcileShared, r.ReconcileFallback, r.ReconcileFailed = p.t.reconciles, p.t.recShared, p.t.recFallback, p.t.recFailed
		r.DeltaShared, r.DeltaFallback, r.DeltaFailed = p.t.deltaShared, p.t.deltaFallback, p.t.deltaFailed
		p.mu.Unlock()
		r.RedisErrors = w.store.Errors() - w.errorsBefore
		r.Hedges, r.Resends = w.store.Hedges()-w.hedgesBefore, w.store.Resends()-w.resendsBefore
		sent, lost := w.store.Charges()
		r.ChargesSent, r.ChargesLost = sent-w.chargesBefore, lost-w.lostBefore
	}
	return r
}

func (w *worker) shutdown() {
	if !w.closed {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.lim.Close(ctx)
		cancel()
	}
	if w.client != nil {
		_ = w.client.Close()
	}
}

// recorder is the ResponseWriter of one client: it keeps the status only.
type recorder struct {
	h    http.Header
	code int
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(b), nil
}
func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
func (r *recorder) reset() {
	clear(r.h)
	r.code = 0
}

// observer counts the limiter's fail-opens by operation, and refusals by
// the bucket that refused.
type observer struct {
	failOpenAdmit, failOpenReconcile atomic.Int64
	refusedBy                        [4]atomic.Int64
}

func (o *observer) Decided(ev llmrate.DecisionEvent) {
	if !ev.Allowed && int(ev.Refused) < len(o.refusedBy) {
		o.refusedBy[ev.Refused].Add(1)
	}
}

func (o *observer) Reconciled(llmrate.ReconcileEvent) {}
func (o *observer) Evicted()                          {}
func (o *observer) FailedOpen(ev llmrate.FailOpenEvent) {
	switch ev.Op {
	case "admit":
		o.failOpenAdmit.Add(1)
	case "reconcile":
		o.failOpenReconcile.Add(1)
	}
}

// countingStore is the llmrate.Store the limiter uses: the redisstore,
// with each call's outcome attributed from what the public API shows.
//   - An admission whose Decision.Receipt is the local fallback's was
//     decided by the fallback (its Redis call failed, or the breaker was
//     open).
//   - Any other was decided by Redis: by its own command (it got Redis's
//     answer, seen by the go-redis hook), by a batch call another caller
//     ran (batching), or, leases on and no command of its own answered, on
//     this process's lease.
//   - A reconcile that failed was not applied; one with the fallback's
//     receipt went to the fallback; any other was applied in Redis (or to
//     a lease Redis had debited).
//
// Every decision not the fallback's and without an answer of its own in
// plain mode, or a lease decision that refused, is one the attribution
// cannot explain: it is counted (unexplained) and shows as unattributed.
// HonoursContext, Close and NotifyEvictions are forwarded.
type countingStore struct {
	s *redisstore.Store
	w *worker
}

var (
	_ llmrate.Store            = (*countingStore)(nil)
	_ llmrate.EvictionNotifier = (*countingStore)(nil)
	_ llmrate.QuotaStore       = (*countingStore)(nil)
)

// Quotas implements llmrate.QuotaStore: the redisstore under it keeps
// quotas (the -month scenario's calendar window).
func (s *countingStore) Quotas() {}

// receiptLocal is the Decision.Receipt redisstore gives the local
// fallback's decisions (see redisstore's package doc, "Faults").
const receiptLocal = "local"

func (s *countingStore) Admit(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	m := &mark{}
	d, err := s.s.Admit(context.WithValue(ctx, markKey{}, m), r)
	s.w.probe.admitted(m, d, err)
	return d, err
}

func (s *countingStore) Reconcile(ctx context.Context, r llmrate.ReconcileRequest) error {
	err := s.s.Reconcile(ctx, r)
	s.w.probe.reconciled(r.Receipt, r.BoundedActual(llmrate.KeyTokens)-r.Estimate, err)
	return err
}

func (s *countingStore) HonoursContext() bool                      { return s.s.HonoursContext() }
func (s *countingStore) Close(ctx context.Context) error           { return s.s.Close(ctx) }
func (s *countingStore) NotifyEvictions(o llmrate.Observer) func() { return s.s.NotifyEvictions(o) }

// markKey is the context key of a call's mark.
type markKey struct{}

// mark records whether Redis answered a command one store call sent under
// its context.
type mark struct {
	ok atomic.Bool
}

// probe is a go-redis hook that marks the calls whose own command Redis
// answered, and the tallies of the store's decisions.
type probe struct {
	mode string

	mu sync.Mutex
	t  tally
}

// tally is what the probe counted.
type tally struct {
	cmdErrors                               map[string]int64
	redisDecided, redisAllowed              int64
	leaseLocal                              int64
	fallbackDecided, fallbackAllowed        int64
	unexplained                             int64
	storeErrors                             int64
	reconciles, recShared, recFallback      int64
	recFailed                               int64
	deltaShared, deltaFallback, deltaFailed int64
}

func newProbe(mode string) *probe { return &probe{mode: mode} }

func (p *probe) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *probe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p *probe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := cmd.Name()
		if err == nil && (name == "evalsha" || name == "eval") {
			if m, _ := ctx.Value(markKey{}).(*mark); m != nil {
				m.ok.Store(true)
			}
		}
		if err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") && !(name == "client" && redis.HasErrorPrefix(err, "ERR unknown subcommand")) {
			p.mu.Lock()
			if p.t.cmdErrors == nil {
				p.t.cmdErrors = map[string]int64{}
			}
			if k := name + ": " + addrs.ReplaceAllString(err.Error(), "$1: "); len(p.t.cmdErrors) < 16 || p.t.cmdErrors[k] > 0 {
				p.t.cmdErrors[k]++
			}
			p.mu.Unlock()
		}
		return err
	}
}

// addrs matches a network error's addresses ("read tcp a->b: "), which
// differ by connection: CommandErrors keeps the operation only.
var addrs = regexp.MustCompile(`(read|write|dial) tcp [^ ]+: `)

// reset forgets every tally.
func (p *probe) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t = tally{}
}

func (p *probe) admitted(m *mark, d llmrate.Decision, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	allowed := int64(0)
	if d.Allowed {
		allowed = 1
	}
	switch {
	case err != nil:
		p.t.storeErrors++
	case d.Receipt == receiptLocal:
		p.t.fallbackDecided++
		p.t.fallbackAllowed += allowed
	case p.mode == modeLease && !m.ok.Load():
		p.t.leaseLocal += allowed
		if !d.Allowed {
			p.t.unexplained++ // a lease only ever admits
		}
	default:
		p.t.redisDecided++
		p.t.redisAllowed += allowed
		if p.mode == modePlain && !m.ok.Load() {
			p.t.unexplained++ // Redis's decision, but no answer came
		}
	}
}

func (p *probe) reconciled(receipt string, delta int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.reconciles++
	switch {
	case err != nil:
		p.t.recFailed++
		p.t.deltaFailed += delta
	case receipt == receiptLocal:
		p.t.recFallback++
		p.t.deltaFallback += delta
	default:
		// Applied in Redis, or to this process's leases, which Redis
		// debited up front.
		p.t.recShared++
		p.t.deltaShared += delta
	}
}

// workerMain runs a worker process and returns its exit code.
func workerMain(arg string) int {
	if err := runWorker(arg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "llmrate-spill worker:", err)
		return 1
	}
	return 0
}

// now is the workers' shared clock: real time plus the offset "go" set.
func (w *worker) now() time.Time { return time.Now().Add(time.Duration(w.offset.Load())) }

// start reads the coordinator's "go" line: "go", or "go <offset in ns>"
// for the month scenario's shifted clock.
func (w *worker) start(line string) error {
	rest, ok := strings.CutPrefix(line, "go")
	if !ok {
		return errors.New("not go")
	}
	if rest = strings.TrimSpace(rest); rest != "" {
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return err
		}
		w.offset.Store(n)
	}
	return nil
}
