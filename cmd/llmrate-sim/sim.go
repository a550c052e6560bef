package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/llmrate/llmrate"
)

// Result is what a simulation saw, per one-second bin.
type Result struct {
	Limits                        llmrate.Limits
	Title                         string
	Offered, Admitted             int
	OfferedTokens, AdmittedTokens int64
	RefusedBy                     map[string]int // bucket → refusals
	NeverFits                     int
	RetryAfter                    map[int]int // seconds → refusals
	OfferedRPS, AdmittedRPS       []float64   // per second
	OfferedTPS, AdmittedTPS       []float64
	Seconds                       int
	// PerModel is admission per model limit (entry name as configured;
	// DefaultBuckets for requests that spent the default buckets), filled
	// only when model limits are set.
	PerModel     map[string]*ModelStats
	lastDecision llmrate.DecisionEvent
	decided      bool
}

// ModelStats is one model limit's share of the traffic.
type ModelStats struct {
	Limits            llmrate.Limits
	Offered, Admitted int
	AdmittedRPS       []float64 // per second
}

// DefaultBuckets names the default buckets in Result.PerModel.
const DefaultBuckets = "(default buckets)"

type observer struct{ r *Result }

func (o observer) Decided(e llmrate.DecisionEvent) { o.r.lastDecision, o.r.decided = e, true }
func (observer) Reconciled(llmrate.ReconcileEvent) {}
func (observer) FailedOpen(llmrate.FailOpenEvent)  {}
func (observer) Evicted()                          {}

// Simulate replays reqs through a real limiter with figures tt, on a clock
// that jumps to each request's time. The provider reports each request's
// tokens as its usage.
//
// With model limits (nil: none), each request's "model" picks its buckets
// as llmrate.WithModelLimits does.
func Simulate(reqs []Request, tt llmrate.TierTable, models llmrate.ModelLimits) (*Result, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	res := &Result{RefusedBy: map[string]int{}, RetryAfter: map[int]int{}, Limits: tt.Free}
	opts := []llmrate.Option{
		llmrate.WithTiers(tt),
		llmrate.WithClock(func() time.Time { return now }),
		llmrate.WithWorkspace(func(r *http.Request) (string, error) { return r.Header.Get("X-Workspace"), nil }),
		llmrate.WithObserver(observer{res}),
	}
	if len(models) > 0 {
		opts = append(opts, llmrate.WithModel(func(r *http.Request) (string, error) { return r.Header.Get("X-Model"), nil }),
			llmrate.WithModelLimits(models))
	}
	lim, err := llmrate.New(opts...)
	if err != nil {
		return nil, err
	}
	h := lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":`+r.Header.Get("X-Tokens")+`,"completion_tokens":0}}`)
	}))
	if len(reqs) > 0 {
		res.Seconds = int(reqs[len(reqs)-1].T) + 1
	}
	for _, s := range []*[]float64{&res.OfferedRPS, &res.AdmittedRPS, &res.OfferedTPS, &res.AdmittedTPS} {
		*s = make([]float64, res.Seconds)
	}
	for _, q := range reqs {
		now = start.Add(time.Duration(q.T * float64(time.Second)))
		w := httptest.NewRecorder()
		res.decided = false
		h.ServeHTTP(w, q.httpRequest())
		if err := res.count(q, w, models); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// httpRequest is q as the simulated client sends it: its estimate as the
// body's length (4 bytes a token), its usage in X-Tokens for the provider.
func (q Request) httpRequest() *http.Request {
	ws := q.Workspace
	if ws == "" {
		ws = q.Key
	}
	est := q.Estimate
	if est == 0 {
		est = max(1, q.Tokens)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.ContentLength = 4 * est
	r.Header.Set("Authorization", "Bearer "+q.Key)
	r.Header.Set("X-Workspace", ws)
	r.Header.Set("X-Tokens", strconv.FormatInt(q.Tokens, 10))
	r.Header.Set("X-Model", q.Model)
	return r
}

// count adds q's outcome, answered w, to r.
func (r *Result) count(q Request, w *httptest.ResponseRecorder, models llmrate.ModelLimits) error {
	sec := int(q.T)
	r.Offered++
	r.OfferedTokens += q.Tokens
	r.OfferedRPS[sec]++
	r.OfferedTPS[sec] += float64(q.Tokens)
	switch {
	case w.Code == http.StatusOK:
		r.Admitted++
		r.AdmittedTokens += q.Tokens
		r.AdmittedRPS[sec]++
		r.AdmittedTPS[sec] += float64(q.Tokens)
	case w.Code == http.StatusTooManyRequests && r.decided:
		r.RefusedBy[r.lastDecision.Refused.String()]++
		if r.lastDecision.NeverFits {
			r.NeverFits++
		}
		ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		r.RetryAfter[ra]++
	default:
		return fmt.Errorf("unexpected status %d at t=%v", w.Code, q.T)
	}
	if len(models) > 0 && r.decided {
		r.countModel(r.lastDecision.Model, models, sec, w.Code == http.StatusOK)
	}
	return nil
}

func (r *Result) countModel(entry string, models llmrate.ModelLimits, sec int, admitted bool) {
	name, lim := entry, r.Limits
	if entry == "" {
		name = DefaultBuckets
	} else {
		lim = models[entry].Free
	}
	if r.PerModel == nil {
		r.PerModel = map[string]*ModelStats{}
	}
	st := r.PerModel[name]
	if st == nil {
		st = &ModelStats{Limits: lim, AdmittedRPS: make([]float64, r.Seconds)}
		r.PerModel[name] = st
	}
	st.Offered++
	if admitted {
		st.Admitted++
		st.AdmittedRPS[sec]++
	}
}

// Print writes the summary.
func (r *Result) Print(w io.Writer) {
	fmt.Fprintln(w, r.Title)
	pct := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return 100 * float64(a) / float64(b)
	}
	fmt.Fprintf(w, "offered  %d requests, %d tokens\n", r.Offered, r.OfferedTokens)
	fmt.Fprintf(w, "admitted %d requests (%.1f%%), %d tokens\n", r.Admitted, pct(r.Admitted, r.Offered), r.AdmittedTokens)
	fmt.Fprintf(w, "refused  %d requests\n", r.Offered-r.Admitted)
	for _, b := range sortedKeys(r.RefusedBy) {
		fmt.Fprintf(w, "  by %-18s %d\n", b, r.RefusedBy[b])
	}
	if r.NeverFits > 0 {
		fmt.Fprintf(w, "  never fit (larger than a whole bucket): %d\n", r.NeverFits)
	}
	if len(r.PerModel) > 0 {
		fmt.Fprintln(w, "per model limit (requests: offered, admitted)")
		for _, name := range sortedKeys(r.PerModel) {
			st := r.PerModel[name]
			fmt.Fprintf(w, "  %-20s %d, %d (%.1f%%)\n", name, st.Offered, st.Admitted, pct(st.Admitted, st.Offered))
		}
	}
	if len(r.RetryAfter) > 0 {
		fmt.Fprintln(w, "Retry-After (seconds: refusals)")
		for s := 1; s <= 60; s++ {
			if n := r.RetryAfter[s]; n > 0 {
				fmt.Fprintf(w, "  %2d: %d\n", s, n)
			}
		}
	}
}
