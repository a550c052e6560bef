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

// PriorityScenario is -priority's workload: one workspace spent by an
// interactive product (a steady trickle of short requests from one key)
// and a batch job (a flood from another key, sending its class in a
// header), run once without a reserve and once with the batch class's
// reserve.
type PriorityScenario struct {
	Limits                   llmrate.Limits // the workspace's figures (and each key's)
	Duration                 time.Duration
	InteractiveRPS           float64 // every 1/RPS seconds from the start
	InteractiveTokens        int64
	BatchFrom, BatchTo       time.Duration // the batch job's span
	BatchRPS                 float64
	BatchTokens              int64
	Reserve                  float64 // the batch class's reserve in the second run
	interactiveKey, batchKey string
}

// DefaultPriority is the scenario docs/sim-priority.svg shows: 60,000
// tokens per minute (a bucket of 120,000); the product sends a 500-token
// request every second (half the refill); from 20 s to 140 s a batch job
// sends four 1,000-token requests a second.
func DefaultPriority() PriorityScenario {
	return PriorityScenario{
		Limits:   llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 60_000},
		Duration: 3 * time.Minute, InteractiveRPS: 0.5, InteractiveTokens: 1000,
		BatchFrom: 20 * time.Second, BatchTo: 140 * time.Second, BatchRPS: 4, BatchTokens: 1000,
		Reserve: 0.5, interactiveKey: "sk-app", batchKey: "sk-batch",
	}
}

// ClassStats is one class's traffic in one run.
type ClassStats struct {
	Offered, Admitted int
	AdmittedRPS       []float64 // per second
	OfferedRPS        []float64
}

// PriorityRun is one run of the scenario: Reserve 0 is without WithPriority.
type PriorityRun struct {
	Reserve            float64
	Interactive, Batch ClassStats
}

// priorityRequest is one request of the scenario.
type priorityRequest struct {
	t     float64
	batch bool
}

// requests returns the scenario's arrivals in time order: each class a
// Poisson stream at its rate (exponential gaps from a fixed seed, so every
// run replays the same trace; evenly spaced streams would lock into step
// and take turns).
func (s PriorityScenario) requests() []priorityRequest {
	rng := rand.New(rand.NewPCG(19, 28))
	var rs []priorityRequest
	for t := rng.ExpFloat64() / s.InteractiveRPS; t < s.Duration.Seconds(); t += rng.ExpFloat64() / s.InteractiveRPS {
		rs = append(rs, priorityRequest{t: t})
	}
	for t := s.BatchFrom.Seconds() + rng.ExpFloat64()/s.BatchRPS; t < s.BatchTo.Seconds(); t += rng.ExpFloat64() / s.BatchRPS {
		rs = append(rs, priorityRequest{t: t, batch: true})
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].t < rs[j].t })
	return rs
}

// SimulatePriority runs the scenario through a real limiter on a simulated
// clock, with reserve as the batch class's reserve (0: no WithPriority).
// The provider reports each request's tokens as its usage.
func SimulatePriority(s PriorityScenario, reserve float64) (*PriorityRun, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	tt := llmrate.TierTable{Free: s.Limits, Developer: s.Limits, Team: s.Limits, Growth: s.Limits, Scale: s.Limits, Enterprise: s.Limits}
	opts := []llmrate.Option{
		llmrate.WithTiers(tt),
		llmrate.WithClock(func() time.Time { return now }),
		llmrate.WithWorkspace(func(*http.Request) (string, error) { return "acme", nil }),
	}
	if reserve > 0 {
		opts = append(opts, llmrate.WithPriority(llmrate.Header("X-Priority"), map[string]float64{"batch": reserve}))
	}
	lim, err := llmrate.New(opts...)
	if err != nil {
		return nil, err
	}
	h := lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":`+r.Header.Get("X-Tokens")+`,"completion_tokens":0}}`)
	}))
	secs := int(math.Ceil(s.Duration.Seconds()))
	run := &PriorityRun{Reserve: reserve}
	for _, c := range []*ClassStats{&run.Interactive, &run.Batch} {
		c.AdmittedRPS, c.OfferedRPS = make([]float64, secs), make([]float64, secs)
	}
	for _, q := range s.requests() {
		now = start.Add(time.Duration(q.t * float64(time.Second)))
		key, tokens, c := s.interactiveKey, s.InteractiveTokens, &run.Interactive
		if q.batch {
			key, tokens, c = s.batchKey, s.BatchTokens, &run.Batch
		}
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.ContentLength = 4 * tokens
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("X-Tokens", strconv.FormatInt(tokens, 10))
		if q.batch {
			r.Header.Set("X-Priority", "batch")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		sec := int(q.t)
		c.Offered++
		c.OfferedRPS[sec]++
		switch w.Code {
		case http.StatusOK:
			c.Admitted++
			c.AdmittedRPS[sec]++
		case http.StatusTooManyRequests:
		default:
			return nil, fmt.Errorf("unexpected status %d at t=%v", w.Code, q.t)
		}
	}
	return run, nil
}

// RunPriority runs the scenario without a reserve and with s.Reserve.
func RunPriority(s PriorityScenario) ([]*PriorityRun, error) {
	var runs []*PriorityRun
	for _, r := range []float64{0, s.Reserve} {
		run, err := SimulatePriority(s, r)
		if err != nil {
			return nil, err
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func (s PriorityScenario) title() string {
	return fmt.Sprintf("one workspace, %d tokens/min (a bucket of %d); product: %g req/s of %d tokens; batch: %g req/s of %d tokens, %v to %v",
		s.Limits.TokensPerMinute, 2*s.Limits.TokensPerMinute, s.InteractiveRPS, s.InteractiveTokens, s.BatchRPS, s.BatchTokens, s.BatchFrom, s.BatchTo)
}

func (r *PriorityRun) name() string {
	if r.Reserve == 0 {
		return "no reserve"
	}
	return "batch reserve " + strconv.FormatFloat(r.Reserve, 'f', -1, 64)
}

// PrintPriority writes each run's admissions per class as a table.
func PrintPriority(w io.Writer, s PriorityScenario, runs []*PriorityRun) {
	fmt.Fprintln(w, s.title())
	fmt.Fprintln(w, "| run | interactive admitted | batch admitted |")
	fmt.Fprintln(w, "|---|---|---|")
	pct := func(c ClassStats) string {
		return fmt.Sprintf("%d of %d (%.1f%%)", c.Admitted, c.Offered, 100*float64(c.Admitted)/float64(max(1, c.Offered)))
	}
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %s | %s |\n", r.name(), pct(r.Interactive), pct(r.Batch))
	}
}

// PrioritySVG draws one panel per run: each class's admitted requests per
// second (solid) and the interactive class's offered (dashed), averaged
// over 10 s bins. The batch job's offered rate, far above what the
// workspace refills, would flatten the rest: the legend states it.
func PrioritySVG(s PriorityScenario, runs []*PriorityRun) string {
	const w, panelH, pad, width = 760, 200, 50, 10
	var b strings.Builder
	h := len(runs)*(panelH+pad+30) + pad + 10
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="12">%s</text>`+"\n", 10, escape(s.title()))
	maxY := 0.0
	for _, r := range runs {
		for _, vals := range [][]float64{r.Interactive.OfferedRPS, r.Interactive.AdmittedRPS, r.Batch.AdmittedRPS} {
			for _, v := range rebin(vals, width) {
				maxY = math.Max(maxY, v)
			}
		}
	}
	maxY = niceCeil(math.Max(maxY, 0.1))
	colors := [2]string{"#1f6feb", "#cf222e"}
	for k, r := range runs {
		top := pad + 10 + k*(panelH+pad+30)
		x0, y0, pw := pad, top+panelH, w-2*pad
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s: requests admitted per second by class (%ds averages; dashed: the product's offered)</text>`+"\n", x0, top-8, escape(r.name()), width)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, y0, x0+pw, y0)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, top, x0, y0)
		for i := 0; i <= 4; i++ {
			y := y0 - i*panelH/4
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-4, y+4, trim(maxY*float64(i)/4))
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`+"\n", x0+1, y, x0+pw, y)
		}
		for i, c := range []ClassStats{r.Interactive, r.Batch} {
			series := [][]float64{rebin(c.AdmittedRPS, width)}
			if i == 0 {
				series = append(series, rebin(c.OfferedRPS, width))
			}
			for j, vals := range series {
				n := len(vals)
				var pts []string
				for t, v := range vals {
					x := float64(x0) + float64(pw)*(float64(t)+0.5)/float64(max(n, 1))
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, float64(y0)-float64(panelH)*v/maxY))
				}
				dash, sw := "none", 2.5
				if j == 1 {
					dash, sw = "6,4", 1.2
				}
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-dasharray="%s" points="%s"/>`+"\n", colors[i], sw, dash, strings.Join(pts, " "))
				if i == 0 && j == 0 {
					for q := 0; q <= 6; q++ {
						bin := q * n / 6
						fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%ds</text>`+"\n", x0+pw*bin/max(n, 1), y0+16, bin*width)
					}
				}
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s: %d of %d admitted</text>`+"\n", x0+8+i*260, y0+34, colors[i],
				[2]string{"product (no class)", fmt.Sprintf("batch (offered %g/s)", s.BatchRPS)}[i], c.Admitted, c.Offered)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
