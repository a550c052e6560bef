package usage_test

import (
	"testing"

	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
)

// TestResultCharge: the charge rule on hand-worked results.
func TestResultCharge(t *testing.T) {
	t.Parallel()
	final := usage.Result{Usage: usage.Usage{InputTokens: 300, OutputTokens: 20}, Reported: true, InputReported: true, Final: true, GeneratedBytes: 4000}
	start := usage.Result{Usage: usage.Usage{InputTokens: 412, OutputTokens: 1}, Reported: true, InputReported: true, GeneratedBytes: 4003}
	outputOnly := usage.Result{Usage: usage.Usage{OutputTokens: 900}, Reported: true, Final: true, GeneratedBytes: 40}
	pending := final
	pending.PendingEvent = true
	cases := []struct {
		name string
		r    usage.Result
		cut  bool
		want int64
	}{
		{"final usage on a complete response: exactly that", final, false, 320},
		{"final usage on a cut response: text counts", final, true, 300 + 1000},
		{"a body that ends mid-event is cut", pending, false, 300 + 1000},
		{"message_start only: input + text ÷ 4", start, false, 412 + 1000},
		{"reported output above the text wins", outputOnly, true, 1000 + 900},
		{"no report, no text (an error body): the estimate", usage.Result{}, false, 1000},
		{"no report: estimate + text ÷ 4, floored", usage.Result{GeneratedBytes: 7}, false, 1001},
		{"saturates", usage.Result{Usage: usage.Usage{InputTokens: 1<<63 - 1}, Reported: true, InputReported: true, GeneratedBytes: 40}, false, 1<<63 - 1},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.r.Charge(1000, c.cut), c.name)
	}
	assert.True(t, final.Complete(false))
	assert.False(t, final.Complete(true))
	assert.False(t, pending.Complete(false))
	assert.False(t, start.Complete(false))
}

// TestChargeFixtures: every fixture whose usage is null or partial, whole
// and cut at many points, gives Result.Charge what the rule says over what
// the encoding/json reference finds in the complete events.
func TestChargeFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range loadFixtures(t) {
		body := readFixture(t, f)
		ref := usageref.Body(f.ContentType, gunzip(t, f, body))
		if ref.Final && !ref.Pending {
			continue
		}
		t.Run(f.File, func(t *testing.T) {
			t.Parallel()
			complete := scan(f.ContentType, f.ContentEncoding, body, 61).Charge(1000, false)
			assert.Equal(t, ref.Charge(1000, false), complete)
			if f.ContentEncoding != "" {
				return
			}
			for k := 0; k <= len(body); k += max(1, len(body)/97) {
				got := scan(f.ContentType, "", body[:k], 13).Charge(1000, true)
				assert.Equal(t, usageref.Body(f.ContentType, body[:k]).Charge(1000, true), got, "cut at %d", k)
				assert.LessOrEqual(t, got, complete, "cut at %d charges more than complete", k)
			}
		})
	}
}
