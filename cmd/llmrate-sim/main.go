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
	f, err := parseFlags(args)
	if err != nil {
		return err
	}
	switch {
	case f.fanout:
		return runFanoutCmd(out, f)
	case f.priority:
		return runPriorityCmd(out, f)
	}
	return replay(out, f)
}

// simFlags is the command line.
type simFlags struct {
	tierName, trace, genModels, svgPath, modelFlag string
	rpm, tpm, tokens, concurrency                  int64
	rps, reserve                                   float64
	keys, workspaces                               int
	duration, maxWait, streamFor                   time.Duration
	fanout, priority                               bool
}

func parseFlags(args []string) (simFlags, error) {
	var f simFlags
	fs := flag.NewFlagSet("llmrate-sim", flag.ContinueOnError)
	fs.StringVar(&f.tierName, "tier", "free", "tier of every workspace: free, developer, team, growth, scale, enterprise")
	fs.Int64Var(&f.rpm, "rpm", 0, "override the tier's requests per minute")
	fs.Int64Var(&f.tpm, "tpm", 0, "override the tier's tokens per minute")
	fs.StringVar(&f.trace, "trace", "", "JSON-lines trace to replay (default: a generated workload)")
	fs.Float64Var(&f.rps, "rps", 5, "generated: requests per second, spread evenly")
	fs.Int64Var(&f.tokens, "tokens", 1000, "generated: tokens per request (estimate = reported)")
	fs.IntVar(&f.keys, "keys", 1, "generated: keys, round-robin, each its own workspace unless -workspaces")
	fs.IntVar(&f.workspaces, "workspaces", 0, "generated: spread the keys over this many workspaces (0: each key its own)")
	fs.DurationVar(&f.duration, "duration", 3*time.Minute, "generated: length of the workload")
	fs.StringVar(&f.genModels, "models", "", "generated: comma-separated model names, round-robin (default: none)")
	fs.StringVar(&f.svgPath, "svg", "", "write the plot to this SVG file")
	fs.StringVar(&f.modelFlag, "model-limits", "", "per-model limits: name=rpm/tpm,… (a name may end in *)")
	fs.BoolVar(&f.fanout, "fanout", false, "compare estimators on the agent fan-out trace (bursts of 50 concurrent 4 KB requests asking up to 4,000 tokens); -tpm sets its figure")
	fs.Int64Var(&f.concurrency, "concurrency", 0, "requests in flight at once per key and per workspace (0: no cap)")
	fs.DurationVar(&f.maxWait, "max-wait", 0, "how long a request may wait for its turn instead of a 429 (0: never)")
	fs.DurationVar(&f.streamFor, "stream", 0, "generated: how long each response streams")
	fs.BoolVar(&f.priority, "priority", false, "replay an interactive product and a batch job on one workspace, without and with the batch class's reserve (WithPriority)")
	fs.Float64Var(&f.reserve, "reserve", 0.5, "-priority: the batch class's reserve, in (0, 1)")
	return f, fs.Parse(args)
}

// runFanoutCmd is -fanout.
func runFanoutCmd(out io.Writer, f simFlags) error {
	tr := DefaultFanout()
	if f.tpm > 0 {
		tr.TPM = f.tpm
	}
	rs, err := RunFanout(tr, FanoutConfigs())
	if err != nil {
		return err
	}
	PrintFanout(out, tr, rs)
	return nil
}

// runPriorityCmd is -priority.
func runPriorityCmd(out io.Writer, f simFlags) error {
	s := DefaultPriority()
	s.Reserve = f.reserve
	if f.tpm > 0 {
		s.Limits.TokensPerMinute = f.tpm
	}
	runs, err := RunPriority(s)
	if err != nil {
		return err
	}
	PrintPriority(out, s, runs)
	return writeSVG(out, f.svgPath, func() string { return PrioritySVG(s, runs) })
}

// replay replays the trace, or the generated workload: as a flow under
// -concurrency or -max-wait, else through Simulate.
func replay(out io.Writer, f simFlags) error {
	tier, lim, err := figures(f.tierName, f.rpm, f.tpm)
	if err != nil {
		return err
	}
	lim.ConcurrentRequests = f.concurrency
	tt := llmrate.TierTable{Free: lim, Developer: lim, Team: lim, Growth: lim, Scale: lim, Enterprise: lim}
	models, err := parseModelLimits(f.modelFlag)
	if err != nil {
		return err
	}
	reqs, err := workload(f.trace, f.rps, f.tokens, f.keys, f.workspaces, f.duration, f.genModels)
	if err != nil {
		return err
	}
	if f.streamFor > 0 && f.trace == "" {
		for i := range reqs {
			reqs[i].Duration = f.streamFor.Seconds()
		}
	}
	if f.concurrency != 0 || f.maxWait != 0 {
		return runFlow(out, reqs, tier, lim, f.maxWait, models, f.svgPath)
	}
	res, err := Simulate(reqs, tt, models)
	if err != nil {
		return err
	}
	res.Title = fmt.Sprintf("%s tier (%d req/min, %d tok/min): %d requests", tier, lim.RequestsPerMinute, lim.TokensPerMinute, len(reqs))
	res.Print(out)
	return writeSVG(out, f.svgPath, res.SVG)
}

// writeSVG writes the plot svg draws to path, if path is set, and says
// so.
func writeSVG(out io.Writer, path string, svg func() string) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path, []byte(svg()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(out, "plot written to %s\n", path)
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
