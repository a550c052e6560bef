package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/llmrate/llmrate"
)

// FanoutTrace is an agent's fan-out: bursts of concurrent requests, each a
// long prompt asking for a long answer, every one naming max_tokens.
type FanoutTrace struct {
	TPM            int64         // the tokens-per-minute figure (the requests figure does not bind)
	Bursts         int           // how many bursts
	Every          time.Duration // from one burst to the next
	Size           int           // requests per burst, all in flight at once
	PromptBytes    int           // bytes of prompt text per request
	MinOut, MaxOut int64         // output tokens, uniform in [MinOut, MaxOut]
	MaxTokens      int64         // the max_tokens each request names
	Speed          float64       // output tokens per second: a response lasts out / Speed
	Seed           uint64
}

// DefaultFanout is the trace of issue 21: bursts of 50 concurrent requests,
// 4 KB prompts, 2,000–4,000 output tokens, max_tokens 4,000.
func DefaultFanout() FanoutTrace {
	return FanoutTrace{TPM: 100_000, Bursts: 6, Every: 10 * time.Second, Size: 50, PromptBytes: 4096,
		MinOut: 2000, MaxOut: 4000, MaxTokens: 4000, Speed: 100, Seed: 21}
}

// fanoutRequest is one request of the trace.
type fanoutRequest struct {
	start, end time.Duration // sent; its response completes
	body       string
	in, out    int64 // the usage the provider reports
}

// requests generates the trace. A request's input tokens are its prompt's
// bytes over a bytes-per-token figure drawn in [3.2, 4.4] (tokenizers
// differ by language and content), so no estimate knows them exactly.
func (f FanoutTrace) requests() []fanoutRequest {
	rng := rand.New(rand.NewPCG(f.Seed, 0x6661_6e6f_7574))
	var reqs []fanoutRequest
	words := []string{"refactor ", "the ", "handler ", "so ", "that ", "tests ", "cover ", "edge ", "cases; ", "explain ", "why. "}
	for b := range f.Bursts {
		for i := range f.Size {
			var p strings.Builder
			for p.Len() < f.PromptBytes {
				p.WriteString(words[rng.IntN(len(words))])
			}
			prompt := p.String()[:f.PromptBytes]
			start := time.Duration(b)*f.Every + time.Duration(i)*time.Millisecond
			out := f.MinOut + rng.Int64N(f.MaxOut-f.MinOut+1)
			in := int64(math.Ceil(float64(f.PromptBytes) / (3.2 + 1.2*rng.Float64())))
			body := `{"model":"agent-model","max_tokens":` + strconv.FormatInt(f.MaxTokens, 10) +
				`,"messages":[{"role":"system","content":"You are one of fifty sub-agents."},{"role":"user","content":"` + prompt + `"}]}`
			reqs = append(reqs, fanoutRequest{start: start, end: start + time.Duration(float64(out)/f.Speed*float64(time.Second)), body: body, in: in, out: out})
		}
	}
	return reqs
}

// FanoutConfig is one limiter configuration the trace runs through.
type FanoutConfig struct {
	Name string
	Opts []llmrate.Option
}

// FanoutConfigs are the configurations compared: the default estimate,
// EstimateFromBody, and each with WithCalibration (the model read by
// ModelFromBody, which shares EstimateFromBody's read-ahead).
func FanoutConfigs() []FanoutConfig {
	model := llmrate.WithModel(llmrate.ModelFromBody())
	body := llmrate.WithEstimator(llmrate.EstimateFromBody())
	return []FanoutConfig{
		{"default estimate (Content-Length / 4)", nil},
		{"EstimateFromBody", []llmrate.Option{body}},
		{"EstimateFromBody + WithCalibration", []llmrate.Option{body, model, llmrate.WithCalibration()}},
		{"default estimate + WithCalibration", []llmrate.Option{model, llmrate.WithCalibration()}},
	}
}

// FanoutResult is what one configuration admitted of the trace's first
// minute, in the tokens the provider reported (what the admitted requests
// consumed).
type FanoutResult struct {
	Name               string
	Offered, Admitted  int   // requests sent in the first minute; admitted of them
	Tokens             int64 // consumed by the requests admitted in the first minute
	BeyondTPM          int64 // Tokens − TPM
	BeyondExact        int64 // max over t of consumed-by-t − (2 × TPM + TPM × t / 1 min); ≤ 0: never beyond
	MeanEstimate       int64 // mean admission estimate of the admitted requests
	MeanActual         int64 // mean charge of the admitted requests
	CalibrationAtEnd   float64
	calibrationPresent bool
}

// RunFanout replays the trace through a real limiter per configuration, on
// a simulated clock. Requests of a burst are in flight together: each is
// admitted when sent and reconciled when its response completes (the
// handler holds it until the clock reaches its end), so a burst is admitted
// before any of its reconciles lands, as under real fan-out.
func RunFanout(f FanoutTrace, configs []FanoutConfig) ([]FanoutResult, error) {
	reqs := f.requests()
	var out []FanoutResult
	for _, c := range configs {
		r, err := runFanout(f, reqs, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

type fanoutEvent struct {
	at  time.Duration
	req int
	end bool
}

func runFanout(f FanoutTrace, reqs []fanoutRequest, c FanoutConfig) (FanoutResult, error) {
	sim, err := newFanoutSim(f, reqs, c)
	if err != nil {
		return FanoutResult{}, err
	}
	res := FanoutResult{Name: c.Name}
	if err := sim.play(&res); err != nil {
		return res, err
	}
	sim.summarize(&res, f.TPM)
	return res, nil
}

// fanoutSim is one fan-out run: the limiter on a clock the events move,
// its handler holding each admitted request until its end event, and what
// was admitted.
type fanoutSim struct {
	start, now             time.Time
	reqs                   []fanoutRequest
	l                      *llmrate.Limiter
	h                      http.Handler
	entered, release, done []chan struct{}
	estimates              []int64
	firstMinute            []fanoutAdmitted
	sumActual              int64
	nAdmitted              int
}

// fanoutAdmitted is a request admitted in the first minute: when, and its
// actual tokens.
type fanoutAdmitted struct {
	at     time.Duration
	tokens int64
}

func newFanoutSim(f FanoutTrace, reqs []fanoutRequest, c FanoutConfig) (*fanoutSim, error) {
	sim := &fanoutSim{start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), reqs: reqs,
		entered: make([]chan struct{}, len(reqs)), release: make([]chan struct{}, len(reqs)), done: make([]chan struct{}, len(reqs))}
	sim.now = sim.start
	lim := llmrate.Limits{RequestsPerMinute: 100_000, TokensPerMinute: f.TPM}
	rec := &fanoutObserver{est: &sim.estimates}
	opts := append([]llmrate.Option{
		llmrate.WithTiers(llmrate.TierTable{Free: lim, Developer: lim, Team: lim, Growth: lim, Scale: lim, Enterprise: lim}),
		llmrate.WithClock(func() time.Time { return sim.now }),
		llmrate.WithObserver(rec),
	}, c.Opts...)
	l, err := llmrate.New(opts...)
	if err != nil {
		return nil, err
	}
	sim.l = l
	sim.h = l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // as a proxy forwards it
		i, _ := strconv.Atoi(r.Header.Get("X-Req"))
		close(sim.entered[i])
		<-sim.release[i]
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"…"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, reqs[i].in, reqs[i].out)
	}))
	return sim, nil
}

// play runs the events in time order: each request's start (admitted,
// its end scheduled, or refused with a 429) and end (released and
// reconciled), counting the first minute's in res.
func (sim *fanoutSim) play(res *FanoutResult) error {
	events := make([]fanoutEvent, 0, 2*len(sim.reqs))
	for i, q := range sim.reqs {
		events = append(events, fanoutEvent{at: q.start, req: i})
	}
	for len(events) > 0 {
		sort.SliceStable(events, func(a, b int) bool { return events[a].at < events[b].at })
		e := events[0]
		events = events[1:]
		sim.now = sim.start.Add(e.at)
		if e.end {
			close(sim.release[e.req])
			<-sim.done[e.req] // reconciled
			continue
		}
		admitted, err := sim.send(e, res)
		if err != nil {
			return err
		}
		if admitted {
			events = append(events, fanoutEvent{at: sim.reqs[e.req].end, req: e.req, end: true})
		}
	}
	return nil
}

// send sends the request that event e starts and reports whether it was
// admitted (its handler entered) rather than refused.
func (sim *fanoutSim) send(e fanoutEvent, res *FanoutResult) (bool, error) {
	q := sim.reqs[e.req]
	sim.entered[e.req], sim.release[e.req], sim.done[e.req] = make(chan struct{}), make(chan struct{}), make(chan struct{})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(q.body))
	r.Header.Set("Authorization", "Bearer sk-agent")
	r.Header.Set("X-Req", strconv.Itoa(e.req))
	w := httptest.NewRecorder()
	go func(i int) {
		sim.h.ServeHTTP(w, r)
		close(sim.done[i])
	}(e.req)
	first := e.at < time.Minute
	if first {
		res.Offered++
	}
	select {
	case <-sim.entered[e.req]:
		sim.nAdmitted++
		sim.sumActual += q.in + q.out
		if first {
			res.Admitted++
			sim.firstMinute = append(sim.firstMinute, fanoutAdmitted{e.at, q.in + q.out})
		}
		return true, nil
	case <-sim.done[e.req]:
		if w.Code != http.StatusTooManyRequests {
			return false, fmt.Errorf("request %d: status %d", e.req, w.Code)
		}
		return false, nil
	}
}

// summarize fills res's figures: the first minute's tokens against the
// exact bound at tpm, the mean estimate and actual, the calibration.
func (sim *fanoutSim) summarize(res *FanoutResult, tpm int64) {
	var cum int64
	res.BeyondExact = math.MinInt64
	for _, a := range sim.firstMinute {
		cum += a.tokens
		bound := 2*tpm + tpm*int64(a.at)/int64(time.Minute)
		res.BeyondExact = max(res.BeyondExact, cum-bound)
	}
	res.Tokens = cum
	res.BeyondTPM = cum - tpm
	if sim.nAdmitted > 0 {
		var s int64
		for _, e := range sim.estimates {
			s += e
		}
		res.MeanEstimate = s / int64(len(sim.estimates))
		res.MeanActual = sim.sumActual / int64(sim.nAdmitted)
	}
	if cal := sim.l.Calibration(); cal != nil {
		res.CalibrationAtEnd, res.calibrationPresent = cal["agent-model"], true
	}
}

// fanoutObserver keeps the estimates of admitted requests. Decided runs on
// the request's goroutine while the driver waits for it.
type fanoutObserver struct{ est *[]int64 }

func (o *fanoutObserver) Decided(e llmrate.DecisionEvent) {
	if e.Allowed {
		*o.est = append(*o.est, e.Estimate)
	}
}
func (*fanoutObserver) Reconciled(llmrate.ReconcileEvent) {}
func (*fanoutObserver) FailedOpen(llmrate.FailOpenEvent)  {}
func (*fanoutObserver) Evicted()                          {}

// PrintFanout writes the table.
func PrintFanout(w io.Writer, f FanoutTrace, rs []FanoutResult) {
	fmt.Fprintf(w, "agent fan-out: %d bursts of %d concurrent requests, one every %v; %d-byte prompts; %d–%d output tokens at %g tokens/s; max_tokens %d\n",
		f.Bursts, f.Size, f.Every, f.PromptBytes, f.MinOut, f.MaxOut, f.Speed, f.MaxTokens)
	fmt.Fprintf(w, "one key at %d tokens/min (a full bucket holds %d); first minute: tokens the admitted requests consumed (reported usage)\n", f.TPM, 2*f.TPM)
	fmt.Fprintln(w, "beyond exact: the most, at any instant, by which the tokens admitted so far exceeded what one exact bucket (2 × TPM + refill) could have admitted; negative: under it")
	fmt.Fprintf(w, "%-40s %9s %9s %10s %11s %13s %9s %9s %6s\n", "configuration", "offered", "admitted", "tokens", "beyond TPM", "beyond exact", "mean est", "mean use", "ratio")
	for _, r := range rs {
		ratio := "-"
		if r.calibrationPresent {
			ratio = strconv.FormatFloat(r.CalibrationAtEnd, 'f', 3, 64)
		}
		fmt.Fprintf(w, "%-40s %9d %9d %10d %11d %13d %9d %9d %6s\n", r.Name, r.Offered, r.Admitted, r.Tokens, r.BeyondTPM, r.BeyondExact, r.MeanEstimate, r.MeanActual, ratio)
	}
}
