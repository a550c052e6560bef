package llmrate

import "github.com/llmrate/llmrate/usage"

// Usage is the token usage a provider reported for one response (see
// package usage, which finds it in response bodies).
type Usage = usage.Usage

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}
