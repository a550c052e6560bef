package upstream_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key's ConcurrentRequests caps its requests in flight: a slot is held
// until the response body is closed, then the key takes requests again.
func TestConcurrentRequestsPerKey(t *testing.T) {
	t.Parallel()
	a := bearerKey("a", "sk-a", 100, 100_000)
	a.Limits.ConcurrentRequests = 1
	r := newRig(t, []upstream.Key{a, bearerKey("b", "sk-b", 100, 100_000)})
	r.p.on("sk-a", sse(openAIStream(10, 5, "x"), true)) // held open until closed
	first, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(chat("m", 400)))
	require.NoError(t, err)
	_, err = first.Body.Read(make([]byte, 16))
	require.NoError(t, err)
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes())

	resp, _ := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"a:skipped_own_limit", "b:admitted"}, r.rec.outcomes(), "a's one slot is taken")

	require.NoError(t, first.Body.Close())
	r.p.on("sk-a", nil)
	r.post(t, chat("m", 400))
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes(), "closed: the slot is free")
}

// When every key's slots are taken, the synthesized 429 says so: the
// concurrent requests gauge, its figure, and a wait of 1 s.
func TestConcurrentRequestsRefusalNamesTheGauge(t *testing.T) {
	t.Parallel()
	a := bearerKey("a", "sk-a", 100, 100_000)
	a.Limits.ConcurrentRequests = 1
	r := newRig(t, []upstream.Key{a})
	r.p.on("sk-a", sse(openAIStream(10, 5, "x"), true)) // held open until closed
	first, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(chat("m", 400)))
	require.NoError(t, err)
	defer first.Body.Close()

	resp, body := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Empty(t, resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "Rate limit reached for concurrent requests (upstream key): limit 1 in flight at once")
}

// A slot is released on every path: a provider 429, a refund.
func TestConcurrentSlotReleasedOnFailures(t *testing.T) {
	t.Parallel()
	a := bearerKey("a", "sk-a", 100, 100_000)
	a.Limits.ConcurrentRequests = 1
	r := newRig(t, []upstream.Key{a, bearerKey("b", "sk-b", 100, 100_000)}, upstream.WithMaxAttempts(1))
	r.p.on("sk-a", tooMany("Retry-After", "0"))
	resp, _ := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	r.p.on("sk-a", nil)
	r.post(t, chat("m", 400))
	assert.Equal(t, []string{"a:provider_429", "a:admitted"}, r.rec.outcomes())

	_, err := r.client().Post(closedURL(t), "application/json", strings.NewReader(chat("m", 400)))
	require.Error(t, err)
	resp, body := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, []string{"a:failed", "a:admitted"}, r.rec.outcomes(), "the refund freed the slot")
}

func TestNegativeConcurrentRequests(t *testing.T) {
	k := bearerKey("a", "sk-a", 1, 1)
	k.Limits.ConcurrentRequests = -1
	_, err := upstream.New([]upstream.Key{k})
	var ce *llmrate.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "ConcurrentRequests -1")
}
