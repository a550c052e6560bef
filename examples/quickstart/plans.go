package main

import (
	"context"
	"time"

	"github.com/llmrate/llmrate"
)

// plans is the README's second block: the operator's own plans, a monthly
// quota in a zone, and a model entry held to it.
func plans() (*llmrate.Limiter, error) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		return nil, err
	}
	pro := llmrate.Plan{Name: "pro", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 400_000,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 10_000_000}}}, // full again on the 1st, 00:00 Berlin
		Models: map[string]llmrate.Limits{"claude-*": {RequestsPerMinute: 50, TokensPerMinute: llmrate.Unlimited, // its own minute, the plan's month
			Windows: []llmrate.Window{{Per: time.Minute, InputTokens: 40_000, OutputTokens: 8_000}}}}}
	free := llmrate.Plan{Name: "free", Limits: llmrate.Limits{RequestsPerMinute: 20, TokensPerMinute: 40_000}}
	byWorkspace := llmrate.PlanResolverFunc(func(_ context.Context, ws string) (llmrate.Plan, bool) { return pro, ws == "acme" })
	return llmrate.New(llmrate.WithPlans(byWorkspace, free), llmrate.WithModel(llmrate.ModelFromBody()))
}
