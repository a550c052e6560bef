package upstream_test

import (
	"net/http"
	"strings"
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
	resp, body := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "43200", resp.Header.Get("Retry-After"), "one request back in 12 h")
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "requests per day", "the message names the meter and window that refused")
	assert.Contains(t, body, "limit 2 per day")
	assert.Contains(t, body, "try again in 43200s")
	assert.Len(t, r.p.calls(), 2, "the third was never sent")
	r.clk.Add(12 * time.Hour)
	resp, _ = r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// A provider's monthly cap that resets on the 1st at 00:00 UTC: a
// calendar month window on the key. Spent, the synthesized 429 waits for
// the 1st, names the calendar window, and says not to retry; on the 1st the
// key is full again, all at once.
func TestKeyMonthlyCapResetsOnTheFirst(t *testing.T) {
	t.Parallel()
	k := bearerKey("anthropic", "sk-a", 50, 1_000_000)
	k.Limits.Windows = []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: 2}}
	r := newRig(t, []upstream.Key{k})
	for range 2 {
		resp, _ := r.post(t, chat("m", 400))
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// The rig's clock: 2026-03-01T12:00Z; the 1st is 30 days 12 h away.
	resp, body := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "2635200", resp.Header.Get("Retry-After"), "732 h to 2026-04-01T00:00Z")
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "requests per calendar month (UTC) (upstream key): limit 2 per calendar month (UTC)")
	r.clk.Add(732*time.Hour - time.Second)
	resp, _ = r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "not a second early")
	r.clk.Add(time.Second)
	for range 2 {
		resp, _ = r.post(t, chat("m", 400))
		assert.Equal(t, http.StatusOK, resp.StatusCode, "full again on the 1st")
	}
}

// A key whose provider publishes no combined tokens per minute: Unlimited
// there, its input and output meters held apart.
func TestKeyTokensPerMinuteUnlimited(t *testing.T) {
	t.Parallel()
	k := bearerKey("anthropic", "sk-a", 50, llmrate.Unlimited)
	k.Limits.Windows = []llmrate.Window{{Per: time.Minute, InputTokens: 1_000_000_000}}
	r := newRig(t, []upstream.Key{k})
	resp, _ := r.post(t, chat("m", 4*2_000_000)) // 2,000,000 tokens: more than any per-minute figure below would hold
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	_, err := upstream.New([]upstream.Key{bearerKey("k", "sk", 50, -2)})
	assert.Error(t, err, "only -1 is Unlimited")
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

// A request larger than a key's input meter never fits it, however large
// its tokens per minute: the 429 names the meter and window whose whole
// capacity the request exceeds, not the tokens per minute it fits.
func TestKeyInputMeterNeverFitsNamesTheMeter(t *testing.T) {
	t.Parallel()
	a := bearerKey("anthropic", "sk-a", 50, 1_000_000)
	a.Limits.Windows = []llmrate.Window{{Per: time.Minute, InputTokens: 1_000}}
	r := newRig(t, []upstream.Key{a})
	resp, body := r.post(t, chat("m", 4*1_001)) // estimate 1,001 input tokens
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "60", resp.Header.Get("Retry-After"))
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "input tokens per minute")
	assert.Contains(t, body, "its estimated 1001 input tokens exceed")
	assert.Contains(t, body, "capacity of 1000")
	assert.Contains(t, body, "Retrying will not help")
	assert.NotContains(t, body, "tokens-per-minute", "not the tokens per minute the request fits")
	assert.Empty(t, r.p.calls())

	resp, _ = r.post(t, chat("m", 4*1_000))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "1,000 input tokens fit exactly")
}

// Keys that each refuse a request for a different meter: the message names
// each meter and window the request exceeds, with the largest capacity
// among the keys that have it.
func TestNeverFitsNamesEveryMeterExceeded(t *testing.T) {
	t.Parallel()
	a := bearerKey("a", "sk-a", 50, 500) // 1,001 tokens exceed its 500 per minute
	b := bearerKey("b", "sk-b", 50, 1_000_000)
	b.Limits.Windows = []llmrate.Window{{Per: 6 * time.Hour, InputTokens: 600}}
	c := bearerKey("c", "sk-c", 50, 1_000_000)
	c.Limits.Windows = []llmrate.Window{{Per: 6 * time.Hour, InputTokens: 900}}
	r := newRig(t, []upstream.Key{a, b, c})
	resp, body := r.post(t, chat("m", 4*1_001))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "tokens per minute (its estimated 1001 tokens exceed a capacity of 500)")
	assert.Contains(t, body, "input tokens per 6h0m0s (its estimated 1001 input tokens exceed a capacity of 900)")
}

// A key the request can never fit is ignored in the Retry-After even while
// the provider skips it: its figures say so without asking anyone.
func TestNeverFitsKeyIgnoredWhileTheProviderSkipsIt(t *testing.T) {
	t.Parallel()
	a := bearerKey("a", "sk-a", 100, 1_000)
	a.Limits.Windows = []llmrate.Window{{Per: time.Minute, InputTokens: 200}}
	b := bearerKey("b", "sk-b", 100, 250)
	r := newRig(t, []upstream.Key{a, b})
	r.p.on("sk-a", tooMany("Retry-After", "30"))
	resp, _ := r.post(t, `{"input":"`+strings.Repeat("x", 388)+`"}`) // 400 bytes: 100 tokens, no model
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"a:provider_429", "b:admitted"}, r.rec.outcomes())

	resp, body := r.post(t, chat("m", 4*300)) // 300 tokens: above a's 200 input, b's 250 tokens
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, []string{"a:skipped_own_limit", "b:skipped_own_limit"}, r.rec.outcomes())
	assert.Equal(t, "60", resp.Header.Get("Retry-After"), "not a's 30 s: it will never take the request")
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "input tokens per minute (its estimated 300 input tokens exceed a capacity of 200) or tokens per minute (its estimated 300 tokens exceed a capacity of 250)")
}

func TestKeyWindowsValidated(t *testing.T) {
	k := bearerKey("x", "s", 10, 100)
	k.Limits.Windows = []llmrate.Window{{Per: 24 * time.Hour}}
	_, err := upstream.New([]upstream.Key{k})
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "every figure is 0")
}

// With upstream.WithEstimator(llmrate.EstimateFromBody()), a key's input
// meter is debited the prompt part of the estimate alone (DESIGN §18: "with
// EstimateFromBody its prompt part alone (without the max_tokens
// allowance)"): Anthropic does not count max_tokens toward its input limit.
// A small prompt with max_tokens above the key's input figure fits that key.
func TestKeyInputMeterExcludesMaxTokensWithBodyEstimate(t *testing.T) {
	t.Parallel()
	a := bearerKey("anthropic", "sk-a", 50, 1_000_000)
	a.Limits.Windows = []llmrate.Window{{Per: time.Minute, InputTokens: 30_000, OutputTokens: 8_000}}
	r := newRig(t, []upstream.Key{a}, upstream.WithEstimator(llmrate.EstimateFromBody()))
	// 40 bytes of prompt text (10 tokens) and a 32,000-token output allowance.
	body := `{"model":"claude","max_tokens":32000,"messages":[{"role":"user","content":"` + strings.Repeat("x", 40) + `"}]}`
	resp, _ := r.post(t, body)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a 10-token prompt fits a 30,000 input-tokens-per-minute key")
	assert.Equal(t, []string{"anthropic:admitted"}, r.rec.outcomes())
}
