package upstream_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RoundTrip's doc says it closes the request's body on every path.
// A body above MaxReplayBody with GetBody is replayed from GetBody after a
// provider 429; when the next key's Authorize panics, the body GetBody
// returned for that attempt is never closed (nor sent).
func TestGetBodyClosedWhenAuthorizePanics(t *testing.T) {
	p := newProvider(t)
	p.on("sk-a", tooMany("Retry-After", "5"))
	keys := []upstream.Key{
		bearerKey("a", "sk-a", 100, 10_000_000),
		{Name: "b", Limits: llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 10_000_000},
			Authorize: func(*http.Request) { panic("b's secret store is down") }},
	}
	r := newRig(t, keys)
	payload := chat("m", upstream.MaxReplayBody+100)

	var mu sync.Mutex
	var replays []*trackedBody
	first := &trackedBody{Reader: strings.NewReader(payload)}
	req, err := http.NewRequest(http.MethodPost, p.srv.URL+"/v1/chat/completions", nil)
	require.NoError(t, err)
	req.Body, req.ContentLength = first, int64(len(payload))
	req.GetBody = func() (io.ReadCloser, error) {
		b := &trackedBody{Reader: bytes.NewReader([]byte(payload))}
		mu.Lock()
		replays = append(replays, b)
		mu.Unlock()
		return b, nil
	}
	resp, err := r.tr.RoundTrip(req)
	if resp != nil {
		_ = resp.Body.Close()
	}
	var pe *llmrate.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, []string{"a:provider_429", "b:failed"}, r.rec.outcomes())
	assert.EqualValues(t, 1, first.closed.Load(), "the caller's body")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, replays, 1, "b's attempt took a body from GetBody")
	assert.EqualValues(t, 1, replays[0].closed.Load(), "the body GetBody returned for b's attempt must be closed")
}
