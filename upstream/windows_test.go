package upstream_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key's daily request quota is enforced by the Transport itself: the
// request after the last one the provider would accept today is not sent,
// and the synthesized 429 tells the honest wait with X-Should-Retry: false.
func TestKeyDailyQuota(t *testing.T) {
	t.Parallel()
	k := bearerKey("gemini-free", "sk-g", 15, 250_000)
	k.Limits.Windows = []llmrate.Window{{Per: 24 * time.Hour, Requests: 2}}
	r := newRig(t, []upstream.Key{k})
	for range 2 {
		resp, _ := r.post(t, chat("m", 400))
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	resp, _ := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "43200", resp.Header.Get("Retry-After"), "one request back in 12 h")
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Len(t, r.p.calls(), 2, "the third was never sent")
	r.clk.Add(12 * time.Hour)
	resp, _ = r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// An Anthropic-shaped key: input and output tokens per minute apart. The
// output meter is charged the reported output; once it is spent the key is
// skipped for the next one.
func TestKeyInputOutputTokensPerMinute(t *testing.T) {
	t.Parallel()
	a := bearerKey("anthropic", "sk-a", 50, 1_000_000)
	a.Limits.Windows = []llmrate.Window{{Per: time.Minute, InputTokens: 30_000, OutputTokens: 100}}
	b := bearerKey("spare", "sk-b", 50, 1_000_000)
	r := newRig(t, []upstream.Key{a, b})
	r.p.on("sk-a", openAIJSON(10, 150, "x")) // 150 output of 100 per minute
	resp, _ := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r.rec.outcomes()
	resp, _ = r.post(t, chat("m", 400))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"anthropic:skipped_own_limit", "spare:admitted"}, r.rec.outcomes(), "a's output is 50 in debt")
	r.clk.Add(30600 * time.Millisecond) // from -50 to 1 at 100 per minute
	resp, _ = r.post(t, chat("m", 400))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"anthropic:admitted"}, r.rec.outcomes())
}

func TestKeyWindowsValidated(t *testing.T) {
	k := bearerKey("x", "s", 10, 100)
	k.Limits.Windows = []llmrate.Window{{Per: 24 * time.Hour}}
	_, err := upstream.New([]upstream.Key{k})
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "every figure is 0")
}
