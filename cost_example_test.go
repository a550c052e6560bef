package llmrate_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/usage"
)

// printCharges prints each reconcile's estimate and charge.
type printCharges struct{}

func (printCharges) Decided(llmrate.DecisionEvent) {}
func (printCharges) Reconciled(e llmrate.ReconcileEvent) {
	fmt.Printf("estimate %d, charged %d (%s)\n", e.Estimate, e.Actual, e.Kind)
}
func (printCharges) FailedOpen(llmrate.FailOpenEvent) {}
func (printCharges) Evicted()                         {}

// A reasoning model's output weighted ×4 under one shared figure; every
// other model is charged its input + output.
func ExampleWithTokenCost() {
	weighted := func(model string, u usage.Usage) int64 {
		if strings.HasPrefix(model, "o3") {
			return u.InputTokens + 4*u.OutputTokens
		}
		return u.InputTokens + u.OutputTokens
	}
	lim, err := llmrate.New(llmrate.WithClock(exampleNow), llmrate.WithModel(llmrate.ModelFromBody()),
		llmrate.WithTokenCost(weighted), llmrate.WithObserver(printCharges{}))
	if err != nil {
		panic(err)
	}
	h := lim.Middleware(exampleProvider()) // reports 20 prompt and 30 completion tokens
	for _, model := range []string{"o3-mini", "gpt-4o-mini"} {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"`+model+`"}`))
		r.Header.Set("Authorization", "Bearer sk-demo")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// estimate 4, charged 140 (usage)
	// estimate 5, charged 50 (usage)
}

// EstimateFromBody debits the prompt and the output the request may
// generate; WithCalibration then learns, per model, how much of that the
// responses really use.
func ExampleEstimateFromBody() {
	var last llmrate.DecisionEvent
	lim, err := llmrate.New(llmrate.WithClock(exampleNow),
		llmrate.WithModel(llmrate.ModelFromBody()),
		llmrate.WithEstimator(llmrate.EstimateFromBody()),
		llmrate.WithCalibration(),
		llmrate.WithObserver(decisionFunc(func(e llmrate.DecisionEvent) { last = e })))
	if err != nil {
		panic(err)
	}
	// The provider uses a quarter of max_tokens.
	// (⌈400 bytes of prompt / 4⌉ + 1000 = 1100 debited; 350 used.)
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":100,"completion_tokens":250}}`)
	})
	h := lim.Middleware(provider)
	body := `{"model":"gpt-4o-mini","max_tokens":1000,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 80) + `"}]}`
	for i := range 9 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk-demo")
		h.ServeHTTP(httptest.NewRecorder(), r)
		if i == 0 || i == 8 {
			fmt.Printf("request %d: estimate %d\n", i+1, last.Estimate)
		}
	}
	fmt.Println(lim.Calibration())
	// Output:
	// request 1: estimate 1100
	// request 9: estimate 350
	// map[gpt-4o-mini:0.3181818181818182]
}

// decisionFunc is an Observer of decisions only.
type decisionFunc func(llmrate.DecisionEvent)

func (f decisionFunc) Decided(e llmrate.DecisionEvent) { f(e) }
func (decisionFunc) Reconciled(llmrate.ReconcileEvent) {}
func (decisionFunc) FailedOpen(llmrate.FailOpenEvent)  {}
func (decisionFunc) Evicted()                          {}
