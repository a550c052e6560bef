package llmrate

import "github.com/llmrate/llmrate/usage"

// Usage is the token usage a provider reported for one response (see
// package usage, which finds it in response bodies).
type Usage = usage.Usage
