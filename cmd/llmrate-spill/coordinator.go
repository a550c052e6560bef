package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// config is one benchmark run: every scenario × every mode.
type config struct {
	Processes, Clients int
	Duration           time.Duration
	Scenarios          []string
	Modes              []string

	RPM, TPM            int64
	Estimate, MinActual int64
	Share               float64
	Batch               int
	Fallback            bool
	RedisTimeout        time.Duration
	StoreTimeout        time.Duration
	RetryInterval       time.Duration
	MaxRetries          int
	CtxTimeout          bool
	Think               time.Duration
	Seed                uint64

	Drop, Silent, Spike, Reset float64
	SpikeLong, SpikeShort      time.Duration
	RestartAt, RestartDown     time.Duration // RestartAt 0: at 40% of Duration
	RedisServer, WorkerPath    string
	DayRequests                int64         // a daily window on the key (window.go); 0: none
	MonthRequests              int64         // a calendar month window on the key, crossing its boundary (window.go); 0: none
	MonthAt                    time.Duration // where in the run the month's boundary falls (0: half-way)
}

// scenario is one set of faults.
type scenario struct {
	name    string
	faults  faultproxy.Faults
	restart bool
	about   string
}

var scenarioNames = []string{"baseline", "drop", "hang", "silent", "spike", "spike-short", "reset", "flaky", "restart"}

func (c *config) scenario(name string) (scenario, error) {
	switch name {
	case "baseline":
		return scenario{name: name, about: "no faults"}, nil
	case "drop":
		return scenario{name: name, faults: faultproxy.Faults{DropReply: c.Drop},
			about: fmt.Sprintf("%g%% of replies dropped after Redis ran the command, connection closed", 100*c.Drop)}, nil
	case "hang":
		return scenario{name: name, faults: faultproxy.Faults{DropReply: c.Drop, Hang: true},
			about: fmt.Sprintf("%g%% of replies dropped after Redis ran the command, connection hung", 100*c.Drop)}, nil
	case "silent":
		return scenario{name: name, faults: faultproxy.Faults{SilentReply: c.Silent},
			about: fmt.Sprintf("%g%% of replies discarded after Redis ran the command, connection left open and silent", 100*c.Silent)}, nil
	case "flaky":
		return scenario{name: name, faults: faultproxy.Faults{SilentReply: c.Silent, ResetRequest: c.Reset / 2, ResetReply: c.Reset / 2,
			SpikeReply: c.Spike, Spike: c.SpikeShort},
			about: fmt.Sprintf("silent, reset and spike-short together: %g%% of replies silenced, %g%% of requests and %g%% of replies reset, %g%% of replies held %v",
				100*c.Silent, 50*c.Reset, 50*c.Reset, 100*c.Spike, c.SpikeShort)}, nil
	case "spike":
		return scenario{name: name, faults: faultproxy.Faults{SpikeReply: c.Spike, Spike: c.SpikeLong},
			about: fmt.Sprintf("%g%% of replies held %v", 100*c.Spike, c.SpikeLong)}, nil
	case "spike-short":
		return scenario{name: name, faults: faultproxy.Faults{SpikeReply: c.Spike, Spike: c.SpikeShort},
			about: fmt.Sprintf("%g%% of replies held %v", 100*c.Spike, c.SpikeShort)}, nil
	case "reset":
		return scenario{name: name, faults: faultproxy.Faults{ResetRequest: c.Reset / 2, ResetReply: c.Reset / 2},
			about: fmt.Sprintf("%g%% of requests and %g%% of replies answered by a connection reset", 50*c.Reset, 50*c.Reset)}, nil
	case "restart":
		return scenario{name: name, restart: true,
			about: fmt.Sprintf("redis-server killed at %v and restarted (empty) %v later", c.restartAt(), c.RestartDown)}, nil
	}
	return scenario{}, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(scenarioNames, ", "))
}

func (c *config) restartAt() time.Duration {
	if c.RestartAt > 0 {
		return c.RestartAt
	}
	return c.Duration * 2 / 5
}

func (c *config) validate() error {
	var errs []error
	if c.Processes < 1 || c.Clients < 1 {
		errs = append(errs, errors.New("-n and -g must be at least 1"))
	}
	if c.Duration <= 0 {
		errs = append(errs, errors.New("-duration must be positive"))
	}
	if c.RPM < 1 || c.TPM < 1 {
		errs = append(errs, errors.New("-rpm and -tpm must be at least 1"))
	}
	if c.Estimate < 1 || c.MinActual < 0 || c.MinActual > c.Estimate {
		errs = append(errs, errors.New("want 0 ≤ -min-actual ≤ -estimate, -estimate ≥ 1 (usage never above the estimate: the exact bound assumes no debt)"))
	}
	if err := c.validateMonth(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateDay(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range c.Scenarios {
		if _, err := c.scenario(s); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range c.Modes {
		switch m {
		case modePlain, modeBatch, modeLease, modeMemory:
		default:
			errs = append(errs, fmt.Errorf("unknown mode %q (known: plain, batch, lease, memory)", m))
		}
	}
	if len(c.Scenarios) == 0 || len(c.Modes) == 0 {
		errs = append(errs, errors.New("no scenario or no mode to run"))
	}
	return errors.Join(errs...)
}

// row is one scenario in one mode, measured.
type row struct {
	Scenario string        `json:"scenario"`
	Mode     string        `json:"mode"`
	About    string        `json:"about"`
	Elapsed  time.Duration `json:"elapsed_ns"` // Redis TIME from go to the last client's stop

	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	Refused  int64 `json:"refused"`
	ReqBound int64 `json:"requests_exact"`
	// TokCharged is what one exact bucket would hold charged for the
	// admitted requests: each one's estimate, replaced by its usage where
	// the reconcile was applied to the shared store (Redis or a lease).
	TokCharged int64 `json:"tokens_charged"`
	TokBound   int64 `json:"tokens_exact"`

	FailOpenAdmit   int64 `json:"fail_open_admit"`
	FallbackAllowed int64 `json:"fallback_allowed"`
	FallbackRefused int64 `json:"fallback_refused"`
	RedisAllowed    int64 `json:"redis_allowed"`
	LeaseLocal      int64 `json:"lease_local"`
	Unattributed    int64 `json:"unattributed"` // admitted − every decision attributed, plus decisions the attribution could not explain: 0 unless it is wrong

	RecShared, RecFallback, RecFailed       int64
	TokRecFallback, TokRecFailed            int64 // credits (estimate − usage) not applied to the shared store
	FailOpenReconcile, RedisErrors, Other   int64
	Hedges, Resends                         int64
	ChargesSent, ChargesLost                int64 // the fallback's admissions charged to Redis, and not
	CloseErrors                             []string
	Proxy                                   faultproxy.Stats `json:"proxy"`
	Workers                                 []workerResult   `json:"workers"`
	Estimate                                int64            `json:"estimate"`
	LeasesOn, BatchingOn, FallbackOn, Store bool
}

// counted is the admissions one exact bucket may not have seen: failed
// open or allowed by the local fallback.
func (r row) counted() int64 { return r.FailOpenAdmit + r.FallbackAllowed }

// exactBound is what one exact bucket of figure perMinute (capacity
// 2 × perMinute, refilling perMinute a minute) can admit in elapsed:
// capacity + refill × elapsed, rounded down, elapsed taken in whole
// microseconds (Redis's TIME resolution).
func exactBound(perMinute int64, elapsed time.Duration) int64 {
	us := big.NewInt(elapsed.Microseconds())
	refill := new(big.Int).Mul(big.NewInt(perMinute), us)
	refill.Quo(refill, big.NewInt(60_000_000))
	return 2*perMinute + refill.Int64()
}

// bench runs the scenarios: one redis-server, one proxy in front of it,
// and for each run N worker processes.
type bench struct {
	cfg    config
	redis  *redisServer
	proxy  *faultproxy.Proxy
	direct *redis.Client // to Redis itself, not through the proxy
	secret string
	log    io.Writer
}

func newBench(ctx context.Context, cfg config, log io.Writer) (*bench, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, log: log}
	needRedis := false
	for _, m := range cfg.Modes {
		needRedis = needRedis || m != modeMemory
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	b.secret = hex.EncodeToString(secret)
	if !needRedis {
		return b, nil
	}
	rs, err := startRedis(ctx, cfg.RedisServer)
	if err != nil {
		return nil, err
	}
	b.redis = rs
	b.direct = redis.NewClient(&redis.Options{Addr: rs.addr, MaxRetries: 3})
	p, err := faultproxy.New(rs.addr, cfg.Seed)
	if err != nil {
		b.close()
		return nil, err
	}
	b.proxy = p
	return b, nil
}

func (b *bench) close() {
	if b.proxy != nil {
		_ = b.proxy.Close()
	}
	if b.direct != nil {
		_ = b.direct.Close()
	}
	if b.redis != nil {
		b.redis.stop()
		_ = os.RemoveAll(b.redis.dir)
	}
}

// run runs every scenario in every mode, in order, calling each with its
// row as soon as it is measured.
func (b *bench) run(ctx context.Context, each func(row)) ([]row, error) {
	var rows []row
	for _, name := range b.cfg.Scenarios {
		sc, _ := b.cfg.scenario(name)
		for _, mode := range b.cfg.Modes {
			r, err := b.runOne(ctx, sc, mode)
			if err != nil {
				return rows, fmt.Errorf("%s/%s: %w", sc.name, mode, err)
			}
			rows = append(rows, r)
			if each != nil {
				each(r)
			}
		}
	}
	return rows, nil
}

// workerProc is one worker process and the lines it printed.
type workerProc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func (w *workerProc) expect(prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				return "", fmt.Errorf("worker %d exited before %q", w.id, prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return strings.TrimPrefix(line, prefix), nil
			}
		case <-t.C:
			return "", fmt.Errorf("worker %d: no %q within %v", w.id, prefix, timeout)
		}
	}
}

// runOne runs scenario sc in one mode: fresh state, the workers started
// and released together, the faults and any restart, then their results
// summed into the row.
func (b *bench) runOne(ctx context.Context, sc scenario, mode string) (row, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // kills workers left running on an error
	cfg := b.cfg
	r := row{Scenario: sc.name, Mode: mode, About: sc.about, Estimate: cfg.Estimate,
		LeasesOn: mode == modeLease, BatchingOn: mode == modeBatch, FallbackOn: cfg.Fallback && mode != modeMemory, Store: mode != modeMemory}
	if sc.restart && mode == modeMemory {
		sc = scenario{name: sc.name, about: "memory store: no Redis to restart"}
	}
	before, err := b.reset(ctx)
	if err != nil {
		return r, err
	}
	f := &fleet{exits: make([]error, cfg.Processes)}
	defer func() {
		cancel()
		f.waits.Wait()
	}()
	if err := f.start(ctx, cfg, b.workerConfig(sc, mode)); err != nil {
		return r, err
	}
	t0, err := b.clock(ctx, sc.faults)
	if err != nil {
		return r, err
	}
	if err := f.release(cfg); err != nil {
		return r, err
	}
	restarted := b.restart(ctx, sc, &f.waits)
	if err := f.expectAll("stopped", cfg.Duration+60*time.Second); err != nil {
		return r, err
	}
	if err := <-restarted; err != nil {
		return r, fmt.Errorf("redis restart: %w", err)
	}
	// The workers' Close applies their queued reconciles and returns
	// their leases without faults: they admit nothing more.
	t1, err := b.clock(ctx, faultproxy.Faults{})
	if err != nil {
		return r, err
	}
	r.Elapsed = t1.Sub(t0)
	if r.Workers, err = f.results(); err != nil {
		return r, err
	}
	if b.proxy != nil {
		r.Proxy = statsSince(before, b.proxy.Stats())
	}
	r.sum(cfg)
	if r.Other > 0 {
		return r, fmt.Errorf("%d responses neither 200 nor 429", r.Other)
	}
	return r, nil
}

// reset empties Redis, clears the proxy's faults and kills its
// connections, and returns the proxy's counts so far (zero without Redis).
func (b *bench) reset(ctx context.Context) (faultproxy.Stats, error) {
	if b.proxy == nil {
		return faultproxy.Stats{}, nil
	}
	if err := b.direct.FlushAll(ctx).Err(); err != nil {
		return faultproxy.Stats{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	_ = b.proxy.Set(faultproxy.Faults{})
	b.proxy.Kill()
	return b.proxy.Stats(), nil
}

// workerConfig is what each worker of sc in mode is told (its ID apart).
func (b *bench) workerConfig(sc scenario, mode string) workerConfig {
	cfg := b.cfg
	wc := workerConfig{HashKey: b.secret, Key: "sk-spill-" + sc.name + "-" + mode, Mode: mode, Share: cfg.Share, Batch: cfg.Batch,
		Fallback: cfg.Fallback, RedisTimeout: cfg.RedisTimeout, StoreTimeout: cfg.StoreTimeout, RetryInterval: cfg.RetryInterval,
		MaxRetries: cfg.MaxRetries, CtxTimeout: cfg.CtxTimeout, Clients: cfg.Clients, Duration: cfg.Duration, Think: cfg.Think,
		RPM: cfg.RPM, TPM: cfg.TPM, Estimate: cfg.Estimate, MinActual: cfg.MinActual, Seed: cfg.Seed, DayRequests: cfg.DayRequests,
		MonthRequests: cfg.MonthRequests}
	if b.proxy != nil {
		wc.Redis = b.proxy.Addr()
	}
	return wc
}

// clock returns the run's clock now (Redis's TIME, else the local clock)
// and then sets the proxy's faults.
func (b *bench) clock(ctx context.Context, faults faultproxy.Faults) (time.Time, error) {
	if b.proxy == nil {
		return time.Now(), nil
	}
	t, err := b.direct.Time(ctx).Result()
	if err != nil {
		return t, fmt.Errorf("TIME: %w", err)
	}
	return t, b.proxy.Set(faults)
}

// restart stops Redis at the scenario's restart instant and starts it
// again after RestartDown, in a goroutine counted in waits; the channel
// receives its outcome (nil at once for a scenario without a restart).
func (b *bench) restart(ctx context.Context, sc scenario, waits *sync.WaitGroup) <-chan error {
	restarted := make(chan error, 1)
	if !sc.restart {
		restarted <- nil
		return restarted
	}
	waits.Add(1)
	go func() {
		defer waits.Done()
		select {
		case <-time.After(b.cfg.restartAt()):
		case <-ctx.Done():
			restarted <- ctx.Err()
			return
		}
		b.redis.stop()
		select {
		case <-time.After(b.cfg.RestartDown):
		case <-ctx.Done():
		}
		restarted <- b.redis.start(ctx)
	}()
	return restarted
}

// fleet is one run's worker processes: their line readers (and the
// restart) counted in waits, each exit status in exits by worker ID.
type fleet struct {
	procs []*workerProc
	waits sync.WaitGroup
	exits []error
}

// start starts cfg.Processes workers told wc and waits until each is
// ready.
func (f *fleet) start(ctx context.Context, cfg config, wc workerConfig) error {
	for i := range cfg.Processes {
		wc.ID = i
		arg, _ := json.Marshal(wc)
		cmd := exec.CommandContext(ctx, cfg.WorkerPath, "-worker", string(arg))
		cmd.Stderr = os.Stderr
		cmd.WaitDelay = 5 * time.Second
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		w := &workerProc{id: i, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
		f.procs = append(f.procs, w)
		f.waits.Add(1)
		go func() {
			defer f.waits.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				w.lines <- sc.Text()
			}
			close(w.lines)
			f.exits[w.id] = cmd.Wait()
		}()
	}
	return f.expectAll("ready", 30*time.Second)
}

// expectAll waits for each worker's line starting with prefix.
func (f *fleet) expectAll(prefix string, timeout time.Duration) error {
	for _, w := range f.procs {
		if _, err := w.expect(prefix, timeout); err != nil {
			return err
		}
	}
	return nil
}

// release tells every worker to go: with a monthly quota, with one offset
// for every worker's clock, placing the 1st at 00:00 UTC MonthAt into the
// run.
func (f *fleet) release(cfg config) error {
	goLine := "go\n"
	if cfg.MonthRequests > 0 {
		goLine = fmt.Sprintf("go %d\n", int64(monthOffset(time.Now(), cfg.monthAt())))
	}
	for _, w := range f.procs {
		if _, err := io.WriteString(w.stdin, goLine); err != nil {
			return fmt.Errorf("worker %d: %w", w.id, err)
		}
	}
	return nil
}

// results reads each worker's result, closes its input and waits for
// every worker to exit.
func (f *fleet) results() ([]workerResult, error) {
	var out []workerResult
	for _, w := range f.procs {
		line, err := w.expect("result ", 60*time.Second)
		if err != nil {
			return out, err
		}
		var res workerResult
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return out, fmt.Errorf("worker %d result: %w", w.id, err)
		}
		out = append(out, res)
		_ = w.stdin.Close()
	}
	f.waits.Wait()
	for i, err := range f.exits {
		if err != nil {
			return out, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	return out, nil
}

// statsSince is the proxy's counts from before to after.
func statsSince(before, after faultproxy.Stats) faultproxy.Stats {
	return faultproxy.Stats{Conns: after.Conns - before.Conns, DialErrors: after.DialErrors - before.DialErrors,
		Refused: after.Refused - before.Refused, Requests: after.Requests - before.Requests, Replies: after.Replies - before.Replies,
		Dropped: after.Dropped - before.Dropped, Silenced: after.Silenced - before.Silenced, Spiked: after.Spiked - before.Spiked, ResetRequest: after.ResetRequest - before.ResetRequest,
		ResetReply: after.ResetReply - before.ResetReply, Killed: after.Killed - before.Killed}
}

// sum fills r's totals from its workers' results, with the bounds the
// run's elapsed time allows under cfg.
func (r *row) sum(cfg config) {
	var deltaShared, unexplained int64
	for _, w := range r.Workers {
		r.Requests += w.Requests
		r.Admitted += w.Admitted
		r.Refused += w.Refused
		r.Other += w.Other
		r.FailOpenAdmit += w.FailOpenAdmit
		r.FailOpenReconcile += w.FailOpenReconcile
		r.FallbackAllowed += w.FallbackAllowed
		r.FallbackRefused += w.FallbackDecided - w.FallbackAllowed
		r.RedisAllowed += w.RedisAllowed
		r.LeaseLocal += w.LeaseLocal
		r.RecShared += w.ReconcileShared
		r.RecFallback += w.ReconcileFallback
		r.RecFailed += w.ReconcileFailed
		r.TokRecFallback -= w.DeltaFallback
		r.TokRecFailed -= w.DeltaFailed
		r.RedisErrors += w.RedisErrors
		r.Hedges += w.Hedges
		r.Resends += w.Resends
		r.ChargesSent += w.ChargesSent
		r.ChargesLost += w.ChargesLost
		deltaShared += w.DeltaShared
		unexplained += w.Unexplained
		if w.CloseError != "" {
			r.CloseErrors = append(r.CloseErrors, fmt.Sprintf("worker %d: %s", w.ID, w.CloseError))
		}
	}
	if r.Mode != modeMemory {
		r.Unattributed = r.Admitted - r.RedisAllowed - r.LeaseLocal - r.FallbackAllowed - r.FailOpenAdmit + unexplained
	}
	r.TokCharged = r.Admitted*cfg.Estimate + deltaShared
	if r.Mode == modeMemory {
		// No shared store: every reconcile went to its process's own
		// buckets; charge each admission its usage, as one exact bucket
		// seeing every reconcile would.
		var used int64
		for _, w := range r.Workers {
			used += w.TokensRep
		}
		r.TokCharged = used
	}
	r.ReqBound = min(exactBound(cfg.RPM, r.Elapsed), dayBound(cfg.DayRequests, r.Elapsed), monthBound(cfg.MonthRequests))
	r.TokBound = exactBound(cfg.TPM, r.Elapsed)
}

// redisServer is the redis-server the benchmark runs, on a free loopback
// port, without persistence: a restart empties it.
type redisServer struct {
	path, addr string
	args       []string
	cmd        *exec.Cmd
	done       chan struct{}
	dir        string
}

func startRedis(ctx context.Context, path string) (*redisServer, error) {
	dir, err := os.MkdirTemp("", "llmrate-spill-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		s := &redisServer{path: path, addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir,
			args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
				"--protected-mode", "no", "--daemonize", "no", "--dir", dir}}
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server did not start: %w", lastErr)
}

func (s *redisServer) start(ctx context.Context) error {
	var err error
	for range 20 { // after a kill the port may linger briefly
		if err = s.startOnce(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}

func (s *redisServer) startOnce(ctx context.Context) error {
	cmd := exec.Command(s.path, s.args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on %s exited at start (port taken?)", s.addr)
		case <-ctx.Done():
			s.stop()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.stop()
	return fmt.Errorf("redis-server on %s did not answer PING", s.addr)
}

// stop kills the server (SIGKILL: a crash, nothing saved) and waits for it.
func (s *redisServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}
