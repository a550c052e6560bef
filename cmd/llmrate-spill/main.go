// Command llmrate-spill is the spillover benchmark: it measures how much
// more N gateway processes sharing one Redis admit, under faults between
// them and Redis, than one exact bucket could have admitted over the same
// time.
//
//	go run ./cmd/llmrate-spill                        # every scenario, plain, batched and leased
//	go run ./cmd/llmrate-spill -scenarios drop -modes plain -duration 10s
//
// It starts its own redis-server (-redis-server) on a free loopback port,
// without persistence, a fault proxy (internal/faultproxy) in front of it,
// and for each scenario and mode N worker processes (this binary, run as
// "llmrate-spill -worker <config>"). Each worker serves G clients that
// send requests for one API key through an llmrate.Limiter on a
// redisstore.Store (docs/redis.md's client: MaxRetries -1, with
// ContextTimeoutEnabled), whose handler reports usage between -min-actual
// and -estimate tokens, so admissions are reconciled down.
//
// Per scenario it prints the requests and tokens admitted beyond what one
// exact bucket could have admitted over the run: capacity (2 × the
// per-minute figure) + refill × elapsed, elapsed from Redis TIME when the
// workers start to when the last one stops. Tokens are charged as one
// exact bucket would hold them: each admitted request's estimate, replaced
// by its usage where the reconcile was applied in Redis (or to a lease
// Redis debited). Beside that: the admissions one exact bucket may not
// have seen, which failed open or were allowed by the local fallback
// (WithFallbackLocal), and the reconciles that did not reach Redis (their
// credits are then not in the charge). A fault inside the client's time
// allowed should admit nothing beyond exact; a Redis restart empties the
// buckets, so its excess is expected.
//
// The modes: plain (one Redis call per admission), batch (WithBatching),
// lease (WithLeases), and memory (a memory store per process: the control,
// which admits about N times one limit).
//
// It exits 1 on a harness error (a worker failing, a response neither 200
// nor 429), never because of spillover.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-worker" {
		os.Exit(workerMain(os.Args[2]))
	}
	os.Exit(coordinatorMain(os.Args[1:], os.Stdout, os.Stderr))
}

func coordinatorMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("llmrate-spill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var scenarios, modes string
	var raw bool
	fs.IntVar(&cfg.Processes, "n", 3, "gateway processes")
	fs.IntVar(&cfg.Clients, "g", 8, "concurrent clients per process")
	fs.DurationVar(&cfg.Duration, "duration", 6*time.Second, "load per scenario and mode")
	fs.StringVar(&scenarios, "scenarios", "baseline,drop,spike,spike-short,reset,restart", "comma-separated: "+strings.Join(scenarioNames, ", "))
	fs.StringVar(&modes, "modes", "plain,batch,lease", "comma-separated: plain, batch, lease, memory")
	fs.Int64Var(&cfg.RPM, "rpm", 600, "requests per minute of the key (capacity twice that)")
	fs.Int64Var(&cfg.TPM, "tpm", 60_000, "tokens per minute of the key (capacity twice that)")
	fs.Int64Var(&cfg.Estimate, "estimate", 128, "tokens each request is estimated at (its body is 4× that in bytes)")
	fs.Int64Var(&cfg.MinActual, "min-actual", 64, "each response reports usage uniformly in [min-actual, estimate]")
	fs.Float64Var(&cfg.Share, "share", 0.1, "lease share (mode lease)")
	fs.IntVar(&cfg.Batch, "batch", 32, "most admissions per call (mode batch)")
	fs.BoolVar(&cfg.Fallback, "fallback", true, "WithFallbackLocal (else failures fail open)")
	fs.DurationVar(&cfg.RedisTimeout, "redis-timeout", 0, "redisstore.WithTimeout (0: its default)")
	fs.DurationVar(&cfg.StoreTimeout, "store-timeout", 0, "llmrate.WithStoreTimeout (0: its default)")
	fs.DurationVar(&cfg.RetryInterval, "retry-interval", 0, "redisstore.WithRetryInterval (0: its default)")
	fs.IntVar(&cfg.MaxRetries, "max-retries", -1, "go-redis MaxRetries (-1, as in docs/redis.md: none; 0: go-redis's default, 3)")
	fs.BoolVar(&cfg.CtxTimeout, "ctx-timeout", true, "go-redis ContextTimeoutEnabled")
	fs.DurationVar(&cfg.Think, "think", time.Millisecond, "pause of each client between requests")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the faults and of the reported usage")
	fs.Float64Var(&cfg.Drop, "drop", 0.02, "fraction of replies dropped (drop, hang)")
	fs.Float64Var(&cfg.Silent, "silent", 0.02, "fraction of replies discarded with the connection left open and silent (silent, flaky)")
	fs.Float64Var(&cfg.Spike, "spike", 0.05, "fraction of replies held (spike, spike-short, flaky)")
	fs.DurationVar(&cfg.SpikeLong, "spike-long", 200*time.Millisecond, "hold of a spike (spike)")
	fs.DurationVar(&cfg.SpikeShort, "spike-short", 10*time.Millisecond, "hold of a short spike, below the store's timeout (spike-short, flaky)")
	fs.Float64Var(&cfg.Reset, "reset", 0.01, "fraction of exchanges answered by a connection reset, half before Redis ran the command, half after (reset, flaky)")
	fs.DurationVar(&cfg.RestartAt, "restart-at", 0, "when Redis is killed (restart; 0: at 40% of -duration)")
	fs.DurationVar(&cfg.RestartDown, "restart-down", 500*time.Millisecond, "how long Redis stays down (restart)")
	fs.Int64Var(&cfg.DayRequests, "day", 0, "requests per day of the key: a daily window beside the per-minute figures (0: none); requests exact is then the tighter bound")
	fs.Int64Var(&cfg.MonthRequests, "month", 0, "requests per calendar month (UTC) of the key, with the month's boundary inside the run (-month-at): every worker's clock is real time plus one offset; requests exact is then at most twice the figure (0: none)")
	fs.DurationVar(&cfg.MonthAt, "month-at", 0, "where in the run the 1st at 00:00 UTC falls (-month; 0: half-way)")
	fs.StringVar(&cfg.RedisServer, "redis-server", "redis-server", "redis-server binary")
	fs.BoolVar(&raw, "json", false, "also print each run's measurements as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Scenarios = splitList(scenarios)
	cfg.Modes = splitList(modes)
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "llmrate-spill:", err)
		return 2
	}
	var err error
	if cfg.RedisServer, err = exec.LookPath(cfg.RedisServer); err != nil {
		fmt.Fprintln(stderr, "llmrate-spill: redis-server not found:", err)
		return 1
	}
	if cfg.WorkerPath, err = os.Executable(); err != nil {
		fmt.Fprintln(stderr, "llmrate-spill:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rows, err := runBench(ctx, cfg, stdout, args)
	if raw {
		for _, r := range rows {
			b, _ := json.Marshal(r)
			fmt.Fprintf(stdout, "%s\n", b)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "llmrate-spill:", err)
		return 1
	}
	return 0
}

// runBench runs cfg and prints the header, a line per run as it ends, and
// the tables.
func runBench(ctx context.Context, cfg config, out io.Writer, args []string) ([]row, error) {
	printHeader(out, cfg, args)
	b, err := newBench(ctx, cfg, out)
	if err != nil {
		return nil, err
	}
	defer b.close()
	if b.redis != nil {
		fmt.Fprintf(out, "redis-server on %s, fault proxy on %s\n\n", b.redis.addr, b.proxy.Addr())
	}
	start := time.Now()
	rows, err := b.run(ctx, func(r row) {
		fmt.Fprintf(out, "ran %-11s %-6s in %v: %d requests, %d admitted\n", r.Scenario, r.Mode, r.Elapsed.Round(time.Millisecond), r.Requests, r.Admitted)
	})
	fmt.Fprintf(out, "\nwall time %v\n\n", time.Since(start).Round(time.Second))
	printTables(out, rows)
	return rows, err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// commit names the code measured when the build did not stamp it (go
// build -ldflags "-X main.commit=$(git rev-parse HEAD)").
var commit = "unknown"

func printHeader(out io.Writer, cfg config, args []string) {
	rev, dirty := commit, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = " (modified)"
				}
			}
		}
	}
	fmt.Fprintf(out, "llmrate-spill %s\n", strings.Join(args, " "))
	fmt.Fprintf(out, "date %s, %s, GOMAXPROCS %d, commit %s%s\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOMAXPROCS(0), rev, dirty)
	fmt.Fprintf(out, "%d processes × %d clients, one key, %v per run; key figures %d RPM (capacity %d), %d TPM (capacity %d)\n",
		cfg.Processes, cfg.Clients, cfg.Duration, cfg.RPM, 2*cfg.RPM, cfg.TPM, 2*cfg.TPM)
	fmt.Fprintf(out, "each request estimated at %d tokens, reporting %d..%d; fallback %v; go-redis MaxRetries %d, ContextTimeoutEnabled %v\n",
		cfg.Estimate, cfg.MinActual, cfg.Estimate, cfg.Fallback, cfg.MaxRetries, cfg.CtxTimeout)
	printDay(out, cfg)
	printMonth(out, cfg)
	for _, name := range cfg.Scenarios {
		sc, _ := cfg.scenario(name)
		fmt.Fprintf(out, "  %-11s %s\n", sc.name, sc.about)
	}
	fmt.Fprintln(out)
}

func printTables(out io.Writer, rows []row) {
	fmt.Fprintln(out, "| scenario | leases | batching | requests admitted | exact | beyond exact | tokens charged | exact | beyond exact | failed open + fallback (tokens) | reconciles not in Redis (tokens) |")
	fmt.Fprintln(out, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		mode := onOff(r.LeasesOn) + " | " + onOff(r.BatchingOn)
		if !r.Store {
			mode = "memory store | —"
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s + %s (%s) | %s (%s) |\n",
			r.Scenario, mode,
			num(r.Admitted), num(r.ReqBound), beyond(r.Admitted, r.ReqBound),
			num(r.TokCharged), num(r.TokBound), beyond(r.TokCharged, r.TokBound),
			num(r.FailOpenAdmit), num(r.FallbackAllowed), num(r.counted()*r.Estimate),
			num(r.RecFailed+r.RecFallback), num(r.TokRecFailed+r.TokRecFallback))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "beyond exact: admitted − exact when positive; in brackets, how far below exact otherwise.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| scenario | mode | elapsed | requests | refused | Redis allowed | lease | fallback allowed / refused | fallback charged / lost | failed open | reconciles Redis / fallback / failed | Redis errors | hedges / resends | proxy: conns, dropped, silenced, held, resets | unattributed |")
	fmt.Fprintln(out, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %s | %v | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s / %s / %s | %s | %s / %s | %d, %d, %d, %d, %d | %d |\n",
			r.Scenario, r.Mode, r.Elapsed.Round(time.Millisecond), num(r.Requests), num(r.Refused), num(r.RedisAllowed), num(r.LeaseLocal),
			num(r.FallbackAllowed), num(r.FallbackRefused), num(r.ChargesSent), num(r.ChargesLost), num(r.FailOpenAdmit),
			num(r.RecShared), num(r.RecFallback), num(r.RecFailed), num(r.RedisErrors), num(r.Hedges), num(r.Resends),
			r.Proxy.Conns, r.Proxy.Dropped, r.Proxy.Silenced, r.Proxy.Spiked, r.Proxy.ResetRequest+r.Proxy.ResetReply+r.Proxy.Killed, r.Unattributed)
	}
	for _, r := range rows {
		for _, e := range r.CloseErrors {
			fmt.Fprintf(out, "%s/%s: Close: %s\n", r.Scenario, r.Mode, e)
		}
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func beyond(got, bound int64) string {
	if got > bound {
		return num(got - bound)
	}
	return "0 (−" + num(bound-got) + ")"
}

// num prints n with thousands separators.
func num(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "−" + b.String()
	}
	return b.String()
}
