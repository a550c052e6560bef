package llmrate_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// upstreamWithOwnHeaders is a provider that reports its own account's rate
// limits, as OpenAI does.
var upstreamWithOwnHeaders = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Ratelimit-Limit-Requests", "10000")
	w.Header().Set("X-Ratelimit-Remaining-Requests", "9999")
	w.Header().Set("X-Ratelimit-Reset-Tokens", "6ms")
	w.Header().Set("Ratelimit", `"default";r=5;t=1`)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{}`)
})

func TestOpenAIHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, upstreamWithOwnHeaders, llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
	w := h.send("sk-h", 400) // 100 tokens
	require.Equal(t, http.StatusOK, w.Code)
	want := map[string]string{
		"X-Ratelimit-Limit-Requests":     "200",    // the bucket: 2 × 100/min
		"X-Ratelimit-Remaining-Requests": "199",    // after this request
		"X-Ratelimit-Reset-Requests":     "600ms",  // one request at 100/min
		"X-Ratelimit-Limit-Tokens":       "400000", // 2 × 200,000/min
		"X-Ratelimit-Remaining-Tokens":   "399900",
		"X-Ratelimit-Reset-Tokens":       "30ms", // 100 tokens at 200,000/min
	}
	for k, v := range want {
		assert.Equal(t, []string{v}, w.Header()[k], k)
	}
	assert.Empty(t, w.Header().Get("Ratelimit"), "the upstream's own headers never leak")

	h.burst("sk-h", 1000)
	w = h.send("sk-h", 400)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "0", w.Header().Get("X-Ratelimit-Remaining-Requests"))
	assert.Equal(t, "2m0s", w.Header().Get("X-Ratelimit-Reset-Requests"), "empty: two minutes to full")
	h.clock.Advance(time.Minute)
	w = h.send("sk-h", 400)
	assert.Equal(t, "99", w.Header().Get("X-Ratelimit-Remaining-Requests"))
	assert.Equal(t, "1m0.6s", w.Header().Get("X-Ratelimit-Reset-Requests"))
}

func TestOpenAIHeadersBindingBucket(t *testing.T) {
	t.Parallel()
	keys := llmrate.DefaultTiers()
	keys.Free = llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1_000_000}
	h := newHarness(t, okHandler, llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI), llmrate.WithKeyTiers(keys))
	w := h.send("sk-k", 400)
	assert.Equal(t, "20", w.Header().Get("X-Ratelimit-Limit-Requests"), "the key's bucket binds requests")
	assert.Equal(t, "19", w.Header().Get("X-Ratelimit-Remaining-Requests"))
	assert.Equal(t, "6s", w.Header().Get("X-Ratelimit-Reset-Requests"))
	assert.Equal(t, "400000", w.Header().Get("X-Ratelimit-Limit-Tokens"), "the workspace's bucket binds tokens")
}

func TestIETFHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, upstreamWithOwnHeaders, llmrate.WithRateLimitHeaders(llmrate.HeadersIETF))
	w := h.send("sk-i", 400)
	assert.Equal(t, `"requests";q=200;w=120, "tokens";q=400000;w=120`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"requests";r=199;t=1, "tokens";r=399900;t=1`, w.Header().Get("RateLimit"))
	assert.Empty(t, w.Header().Get("X-Ratelimit-Remaining-Requests"), "the upstream's own headers never leak")
}

// TestProviderOwn429RelayedUntouched: the provider's own 429 reaches the
// client exactly as the provider sent it (its Retry-After, its rate-limit
// headers, its body), with none of llmrate's headers added, whatever the
// configured header style.
func TestProviderOwn429RelayedUntouched(t *testing.T) {
	t.Parallel()
	own := http.Header{
		"Content-Type":                   {"application/json"},
		"Retry-After":                    {"7"},
		"X-Ratelimit-Limit-Requests":     {"10000"},
		"X-Ratelimit-Remaining-Requests": {"0"},
		"X-Ratelimit-Reset-Requests":     {"7s"},
		"X-Ratelimit-Limit-Tokens":       {"30000000"},
		"X-Ratelimit-Remaining-Tokens":   {"0"},
		"X-Ratelimit-Reset-Tokens":       {"1m2s"},
		"Ratelimit":                      {`"default";r=0;t=7`},
		"Ratelimit-Policy":               {`"default";q=10000;w=60`},
	}
	const body = `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","code":"rate_limit_exceeded"}}`
	provider := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range own {
			w.Header()[k] = append([]string(nil), v...)
		}
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, body)
	})
	for _, style := range []struct {
		name string
		s    llmrate.HeaderStyle
	}{{"none", llmrate.HeadersNone}, {"openai", llmrate.HeadersOpenAI}, {"ietf", llmrate.HeadersIETF}} {
		t.Run(style.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, provider, llmrate.WithRateLimitHeaders(style.s))
			w := h.send("sk-own429", 400)
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, own, w.Header(), "exactly the provider's headers")
			assert.Equal(t, body, w.Body.String())
		})
		t.Run(style.name+"/shadow", func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, provider, llmrate.WithRateLimitHeaders(style.s), llmrate.WithShadow())
			for range 200 { // the key's burst: the next request is one shadow mode would refuse
				h.send("sk-own429", 0)
			}
			w := h.send("sk-own429", 0)
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, own, w.Header(), "exactly the provider's headers, on a request shadow mode passed")
			assert.Equal(t, body, w.Body.String())
		})
	}
}
