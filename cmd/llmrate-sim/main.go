// Command llmrate-sim sizes limits before you ship them: it replays a
// request trace (or a generated workload) through the real llmrate limiter
// on a simulated clock, prints what was admitted and refused per bucket and
// the Retry-After distribution, and writes an SVG of offered vs admitted
// requests and tokens per second.
//
//	go run ./cmd/llmrate-sim -tier free -rps 5 -tokens 1000 -duration 3m -svg plot.svg
//	go run ./cmd/llmrate-sim -tier growth -trace trace.jsonl
//	go run ./cmd/llmrate-sim -trace trace.jsonl -model-limits 'gpt-4o*=50/30000,o3=5/10000'
//	go run ./cmd/llmrate-sim -rps 6 -models gpt-4o,gpt-4o-mini,llama-3 -model-limits 'gpt-4o*=40/100000'
//	go run ./cmd/llmrate-sim -fanout
//	go run ./cmd/llmrate-sim -rps 1 -tokens 4000 -stream 20s -concurrency 12 -max-wait 10s
//	go run ./cmd/llmrate-sim -priority -svg docs/sim-priority.svg
//
// A trace is JSON lines, in time order:
//
//	{"t": 0.25, "key": "sk-a", "workspace": "acme", "model": "gpt-4o", "tokens": 1800, "estimate": 1200, "duration": 42.5}
//
// t is seconds from the start; workspace defaults to the key; model is
// optional; estimate (the admission estimate, Content-Length/4 in
// production) defaults to tokens, which is what the provider then reports;
// duration is how many seconds the response streams (0 by default).
//
// -concurrency (Limits.ConcurrentRequests) and -max-wait (WithMaxWait)
// replay the trace as a flow: each request holds its slot from admission
// until its response ends (a wait included), and the summary and the SVG
// split arrivals into admitted at once, admitted after a wait and
// refused, with the requests in flight against the figure. The flow runs
// on llmrate's memory store with the limiter's Store calls (the limiter
// waits on a real timer, which a replay cannot); it takes no model limits.
//
// -fanout replays an agent's fan-out (bursts of 50 concurrent requests
// with 4 KB prompts asking for up to 4,000 tokens) through the default
// estimate, EstimateFromBody and WithCalibration, and prints how far each
// let the first minute's consumption past the limit.
//
// -priority replays one workspace spent by an interactive product and a
// batch job (llmrate.WithPriority), once without a reserve and once with
// the batch class's reserve (-reserve, default 0.5), and prints and plots
// the requests admitted per second for each class.
//
// -model-limits gives models (exact names, or prefixes ending in "*") their
// own limits, name=requests/tokens per minute, comma-separated, as
// llmrate.WithModelLimits does; the summary and the SVG then show
// admission per model limit.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/llmrate/llmrate"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "llmrate-sim:", err)
		os.Exit(1)
	}
}

// Request is one line of a trace.
type Request struct {
	T         float64 `json:"t"`
	Key       string  `json:"key"`
	Workspace string  `json:"workspace,omitempty"`
	Model     string  `json:"model,omitempty"`
	Tokens    int64   `json:"tokens"`
	Estimate  int64   `json:"estimate,omitempty"`
	Duration  float64 `json:"duration,omitempty"` // seconds the response streams
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("llmrate-sim", flag.ContinueOnError)
	tierName := fs.String("tier", "free", "tier of every workspace: free, developer, team, growth, scale, enterprise")
	rpm := fs.Int64("rpm", 0, "override the tier's requests per minute")
	tpm := fs.Int64("tpm", 0, "override the tier's tokens per minute")
	trace := fs.String("trace", "", "JSON-lines trace to replay (default: a generated workload)")
	rps := fs.Float64("rps", 5, "generated: requests per second, spread evenly")
	tokens := fs.Int64("tokens", 1000, "generated: tokens per request (estimate = reported)")
	keys := fs.Int("keys", 1, "generated: keys, round-robin, each its own workspace unless -workspaces")
	workspaces := fs.Int("workspaces", 0, "generated: spread the keys over this many workspaces (0: each key its own)")
	duration := fs.Duration("duration", 3*time.Minute, "generated: length of the workload")
	genModels := fs.String("models", "", "generated: comma-separated model names, round-robin (default: none)")
	svgPath := fs.String("svg", "", "write the plot to this SVG file")
	modelFlag := fs.String("model-limits", "", "per-model limits: name=rpm/tpm,… (a name may end in *)")
	fanout := fs.Bool("fanout", false, "compare estimators on the agent fan-out trace (bursts of 50 concurrent 4 KB requests asking up to 4,000 tokens); -tpm sets its figure")
	concurrency := fs.Int64("concurrency", 0, "requests in flight at once per key and per workspace (0: no cap)")
	maxWait := fs.Duration("max-wait", 0, "how long a request may wait for its turn instead of a 429 (0: never)")
	streamFor := fs.Duration("stream", 0, "generated: how long each response streams")
	priority := fs.Bool("priority", false, "replay an interactive product and a batch job on one workspace, without and with the batch class's reserve (WithPriority)")
	reserve := fs.Float64("reserve", 0.5, "-priority: the batch class's reserve, in (0, 1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *fanout {
		f := DefaultFanout()
		if *tpm > 0 {
			f.TPM = *tpm
		}
		rs, err := RunFanout(f, FanoutConfigs())
		if err != nil {
			return err
		}
		PrintFanout(out, f, rs)
		return nil
	}
	if *priority {
		s := DefaultPriority()
		s.Reserve = *reserve
		if *tpm > 0 {
			s.Limits.TokensPerMinute = *tpm
		}
		runs, err := RunPriority(s)
		if err != nil {
			return err
		}
		PrintPriority(out, s, runs)
		if *svgPath != "" {
			if err := os.WriteFile(*svgPath, []byte(PrioritySVG(s, runs)), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(out, "plot written to %s\n", *svgPath)
		}
		return nil
	}
	tier, lim, err := figures(*tierName, *rpm, *tpm)
	if err != nil {
		return err
	}
	lim.ConcurrentRequests = *concurrency
	tt := llmrate.TierTable{Free: lim, Developer: lim, Team: lim, Growth: lim, Scale: lim, Enterprise: lim}
	models, err := parseModelLimits(*modelFlag)
	if err != nil {
		return err
	}

	reqs, err := workload(*trace, *rps, *tokens, *keys, *workspaces, *duration, *genModels)
	if err != nil {
		return err
	}
	if *streamFor > 0 && *trace == "" {
		for i := range reqs {
			reqs[i].Duration = streamFor.Seconds()
		}
	}
	if *concurrency != 0 || *maxWait != 0 {
		return runFlow(out, reqs, tier, lim, *maxWait, models, *svgPath)
	}
	res, err := Simulate(reqs, tt, models)
	if err != nil {
		return err
	}
	res.Title = fmt.Sprintf("%s tier (%d req/min, %d tok/min): %d requests", tier, lim.RequestsPerMinute, lim.TokensPerMinute, len(reqs))
	res.Print(out)
	if *svgPath != "" {
		if err := os.WriteFile(*svgPath, []byte(res.SVG()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "plot written to %s\n", *svgPath)
	}
	return nil
}

// figures returns the tier named tierName and its figures, with rpm and tpm
// (when positive) in place of the tier's own.
func figures(tierName string, rpm, tpm int64) (llmrate.Tier, llmrate.Limits, error) {
	tier, err := llmrate.ParseTier(tierName)
	if err != nil {
		return 0, llmrate.Limits{}, err
	}
	lim := llmrate.DefaultTiers().For(tier)
	if rpm > 0 {
		lim.RequestsPerMinute = rpm
	}
	if tpm > 0 {
		lim.TokensPerMinute = tpm
	}
	return tier, lim, nil
}

// workload returns the requests to replay: the trace at path, else a
// generated workload (models, comma-separated, assigned round-robin).
func workload(path string, rps float64, tokens int64, keys, workspaces int, duration time.Duration, models string) ([]Request, error) {
	if path != "" {
		return readTrace(path)
	}
	if rps <= 0 || keys < 1 || duration <= 0 || tokens < 1 {
		return nil, errors.New("-rps, -keys, -duration and -tokens must be positive")
	}
	reqs := generate(rps, tokens, keys, workspaces, duration)
	if models != "" {
		names := strings.Split(models, ",")
		for i := range reqs {
			reqs[i].Model = strings.TrimSpace(names[i%len(names)])
		}
	}
	return reqs, nil
}

func readTrace(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reqs []Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var r Request
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		switch {
		case r.Key == "":
			return nil, fmt.Errorf("%s:%d: missing key", path, line)
		case r.T < 0 || (len(reqs) > 0 && r.T < reqs[len(reqs)-1].T):
			return nil, fmt.Errorf("%s:%d: t must be non-negative and in order", path, line)
		case r.Tokens < 0 || r.Estimate < 0:
			return nil, fmt.Errorf("%s:%d: negative tokens", path, line)
		}
		reqs = append(reqs, r)
	}
	return reqs, sc.Err()
}

func generate(rps float64, tokens int64, keys, workspaces int, d time.Duration) []Request {
	n := int(rps * d.Seconds())
	reqs := make([]Request, n)
	for i := range reqs {
		k := i % keys
		r := Request{T: float64(i) / rps, Key: fmt.Sprintf("sk-%d", k), Tokens: tokens}
		if workspaces > 0 {
			r.Workspace = fmt.Sprintf("ws-%d", k%workspaces)
		}
		reqs[i] = r
	}
	return reqs
}

// parseModelLimits parses name=rpm/tpm,… into ModelLimits with the same
// figures on every tier (the simulation runs one tier).
func parseModelLimits(s string) (llmrate.ModelLimits, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	m := llmrate.ModelLimits{}
	for _, item := range strings.Split(s, ",") {
		name, figs, ok := strings.Cut(strings.TrimSpace(item), "=")
		r, t, ok2 := strings.Cut(figs, "/")
		rpm, err1 := strconv.ParseInt(r, 10, 64)
		tpm, err2 := strconv.ParseInt(t, 10, 64)
		if !ok || !ok2 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("-model-limits: %q: want name=requests/tokens", item)
		}
		l := llmrate.Limits{RequestsPerMinute: rpm, TokensPerMinute: tpm}
		m[name] = llmrate.TierTable{Free: l, Developer: l, Team: l, Growth: l, Scale: l, Enterprise: l}
	}
	return m, nil
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// runFlow runs and reports a flow simulation (-concurrency, -max-wait).
func runFlow(out io.Writer, reqs []Request, tier llmrate.Tier, lim llmrate.Limits, maxWait time.Duration, models llmrate.ModelLimits, svgPath string) error {
	switch {
	case len(models) > 0:
		return errors.New("-model-limits cannot be combined with -concurrency or -max-wait yet")
	case lim.ConcurrentRequests < 0:
		return errors.New("-concurrency must not be negative")
	case maxWait < 0 || maxWait > llmrate.MaxMaxWait:
		return fmt.Errorf("-max-wait must be in [0, %v]", llmrate.MaxMaxWait)
	}
	res, err := SimulateFlow(reqs, lim, maxWait)
	if err != nil {
		return err
	}
	res.Title = fmt.Sprintf("%s tier (%d req/min, %d tok/min, %d in flight, max wait %v): %d requests", tier, lim.RequestsPerMinute, lim.TokensPerMinute,
		lim.ConcurrentRequests, maxWait, len(reqs))
	res.Print(out)
	if svgPath != "" {
		if err := os.WriteFile(svgPath, []byte(res.SVG()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "plot written to %s\n", svgPath)
	}
	return nil
}
