package upstream_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requestTooLarge answers as OpenAI does a single request above the
// organization's tokens per minute: a 429 "Request too large" whose
// x-ratelimit-* headers show room in every dimension (the request was
// refused, not counted), with the tokens window resetting in 16 s. Other
// requests (bodies under 4,000 bytes) get a completion.
func requestTooLarge(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h := w.Header()
	h.Set("X-Ratelimit-Limit-Requests", "500")
	h.Set("X-Ratelimit-Limit-Tokens", "30000")
	h.Set("X-Ratelimit-Remaining-Requests", "499")
	h.Set("X-Ratelimit-Remaining-Tokens", "22000")
	h.Set("X-Ratelimit-Reset-Requests", "120ms")
	h.Set("X-Ratelimit-Reset-Tokens", "16s")
	if len(body) < 4000 {
		openAIJSON(10, 5, "ok")(w, r)
		return
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, `{"error":{"message":"Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 45000. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`)
}

// One caller's oversized request refused by every key does not take the
// keys out of rotation for everyone: a 429 whose headers show no
// dimension at 0 skips the key for 1 s, not until the 16 s reset of a
// dimension that still has room.
func TestRequestTooLargeSkipsAKeyForOneSecond(t *testing.T) {
	t.Parallel()
	keys := []upstream.Key{bearerKey("a", "sk-a", 500, 1_000_000), bearerKey("b", "sk-b", 500, 1_000_000), bearerKey("c", "sk-c", 500, 1_000_000)}
	r := newRig(t, keys)
	for _, c := range []string{"sk-a", "sk-b", "sk-c"} {
		r.p.on(c, requestTooLarge)
	}
	resp, body := r.post(t, chat("gpt-4o", 45_000))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Contains(t, body, "Request too large", "the provider's own 429")
	assert.Equal(t, []string{"a:provider_429", "b:provider_429", "c:provider_429"}, r.rec.outcomes())

	resp, _ = r.post(t, chat("gpt-4o", 400))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "within the second: every key skipped")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	r.rec.outcomes()

	r.clk.Add(time.Second)
	resp, body = r.post(t, chat("gpt-4o", 400))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes(), "a second later the first key takes the next small request")
}

// With a dimension at 0, the key is skipped until the latest reset among
// the dimensions at 0 (never the reset of one with room), as before.
func TestProvider429SkipsUntilTheResetOfTheDimensionAtZero(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 500, 1_000_000), bearerKey("b", "sk-b", 500, 1_000_000)})
	r.p.on("sk-a", tooMany("X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "3s",
		"X-Ratelimit-Remaining-Tokens", "22000", "X-Ratelimit-Reset-Tokens", "16s"))
	resp, _ := r.post(t, chat("gpt-4o", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"a:provider_429", "b:admitted"}, r.rec.outcomes())
	r.p.on("sk-a", nil)

	r.clk.Add(2999 * time.Millisecond)
	r.post(t, chat("gpt-4o", 400))
	assert.Equal(t, []string{"a:skipped_provider", "b:admitted"}, r.rec.outcomes())
	r.clk.Add(time.Millisecond)
	r.post(t, chat("gpt-4o", 400))
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes(), "3 s: the requests dimension has reset")
}
