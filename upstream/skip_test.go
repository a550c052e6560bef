package upstream_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modelOf is a chat request body naming model.
func modelOf(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

// Model names come from clients: a key's per-model skips hold at most 256
// names of at most 256 bytes each. 300 distinct 1 MB names answered 429
// hold nothing of their own: every name longer than 256 bytes shares one
// skip, apart from every shorter name.
func TestSkipsHoldBoundedModelNames(t *testing.T) {
	t.Parallel()
	answered := 0
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
		answered++
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"3600"}},
			Body: io.NopCloser(strings.NewReader(`{"error":{"message":"slow down"}}`)), Request: req}, nil
	})
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 1_000_000, 1_000_000_000_000)}, upstream.WithBase(base))
	long := strings.Repeat("m", 1_000_000)
	name := func(i int) string { return fmt.Sprintf("%03d", i) + long[3:] }
	// Two in the body's "model"...
	for i := range 2 {
		resp, _ := r.post(t, modelOf(name(i)))
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	}
	// ...and 300 in a Gemini-style path, which costs no 1 MB body scan.
	for i := range 300 {
		req := &http.Request{Method: http.MethodPost, Header: http.Header{},
			URL:  &url.URL{Scheme: "http", Host: "provider.test", Path: "/v1beta/models/" + name(2+i) + ":generateContent"},
			Body: io.NopCloser(strings.NewReader(`{"contents":[]}`)), ContentLength: 15}
		resp, err := r.tr.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
	}
	assert.Equal(t, 1, answered, "the first long name's skip holds every later one off the key")
	n, bytes := upstream.SkippedModels(r.tr, "a")
	assert.Equal(t, 1, n, "one skip for every name longer than 256 bytes")
	assert.Zero(t, bytes)

	// A name of 256 bytes is held as itself: apart from the long names'
	// skip and from another name of 256 bytes.
	at := func(c string) string { return strings.Repeat(c, 256) }
	r.post(t, modelOf(at("x")))
	assert.Equal(t, 2, answered, "a 256-byte name is not a long name")
	r.post(t, modelOf(at("x")))
	assert.Equal(t, 2, answered, "skipped for its own name")
	r.post(t, modelOf(at("y")))
	assert.Equal(t, 3, answered, "another 256-byte name is not skipped with it")

	// The bound on names: 256 of them, at most 256 bytes each.
	for i := range 300 {
		r.post(t, modelOf(fmt.Sprintf("%03d", i)+at("z")[3:]))
	}
	n, bytes = upstream.SkippedModels(r.tr, "a")
	assert.Equal(t, 256, n)
	assert.LessOrEqual(t, bytes, 256*256)
}
