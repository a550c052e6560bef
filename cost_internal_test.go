package llmrate

import (
	"net/http"
	"testing"

	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
)

// chargedUsage builds the Usage of the charge rule: final usage whole, its
// breakdown included; otherwise input reported or the estimate, output the
// larger of reported and ⌊G/4⌋, the breakdown only with reported input.
func TestChargedUsage(t *testing.T) {
	rep := usage.Usage{InputTokens: 900, OutputTokens: 40, CachedInputTokens: 600, CacheWriteTokens: 100, ReasoningTokens: 30}
	cases := []struct {
		name string
		res  usage.Result
		cut  bool
		want usage.Usage
	}{
		{"final", usage.Result{Usage: rep, Reported: true, InputReported: true, Final: true, GeneratedBytes: 4000}, false, rep},
		{"final but cut", usage.Result{Usage: rep, Reported: true, InputReported: true, Final: true, GeneratedBytes: 4000}, true,
			usage.Usage{InputTokens: 900, OutputTokens: 1000, CachedInputTokens: 600, CacheWriteTokens: 100, ReasoningTokens: 30}},
		{"partial, input reported", usage.Result{Usage: rep, Reported: true, InputReported: true, GeneratedBytes: 100}, false,
			usage.Usage{InputTokens: 900, OutputTokens: 40, CachedInputTokens: 600, CacheWriteTokens: 100, ReasoningTokens: 30}},
		{"partial, output only", usage.Result{Usage: usage.Usage{OutputTokens: 40, ReasoningTokens: 30}, Reported: true, GeneratedBytes: 403}, false,
			usage.Usage{InputTokens: 77, OutputTokens: 100}},
		{"estimated", usage.Result{GeneratedBytes: 7}, false, usage.Usage{InputTokens: 77, OutputTokens: 1}},
	}
	for _, c := range cases {
		got := chargedUsage(c.res, 77, c.cut)
		assert.Equal(t, c.want, got, c.name)
		assert.Equal(t, c.res.Charge(77, c.cut), got.Total(), "%s: the default cost is the default charge", c.name)
	}
}

// New recognises ModelFromBody with EstimateFromBody, to scan a body once
// for both, and nothing else.
func TestPrimeBody(t *testing.T) {
	wrapped := func(r *http.Request) (string, error) { return ModelFromBody()(r) }
	for _, c := range []struct {
		opts []Option
		want bool
	}{
		{[]Option{WithModel(ModelFromBody()), WithEstimator(EstimateFromBody()), WithCalibration()}, true},
		{[]Option{WithModel(ModelFromBody()), WithCalibration()}, false},
		{[]Option{WithEstimator(EstimateFromBody())}, false},
		{[]Option{WithModel(wrapped), WithEstimator(EstimateFromBody()), WithCalibration()}, false},
		{[]Option{WithModel(ModelFromBody()), WithEstimator(EstimateTokens), WithCalibration()}, false},
	} {
		l, err := New(c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		assert.Equal(t, c.want, l.primeBody)
	}
}
