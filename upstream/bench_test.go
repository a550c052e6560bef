package upstream_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
)

// The Transport's added cost per request (body read ahead, admit, clone,
// scan, reconcile) is BenchmarkTransport* minus BenchmarkBareTransport*:
// the same loopback round trip on a bare http.Transport.

const benchBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in five words, please, and nothing else at all."}]}`

func benchProvider(b *testing.B, contentType, body string) *httptest.Server {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, body)
	}))
	b.Cleanup(srv.Close)
	return srv
}

func benchRoundTrips(b *testing.B, rt http.RoundTripper, url string) {
	b.Helper()
	c := &http.Client{Transport: rt}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Post(url, "application/json", strings.NewReader(benchBody))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

func benchTransport(b *testing.B, base http.RoundTripper) *upstream.Transport {
	b.Helper()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	big := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	tr, err := upstream.New([]upstream.Key{{Name: "k", Limits: big, Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer sk-bench") }}},
		upstream.WithBase(base), upstream.WithClock(func() time.Time { return now }))
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

var (
	benchJSON = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how are you?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":31,"completion_tokens":7,"total_tokens":38}}`
	benchSSE  = openAIStream(31, 7, "Hello", " there,", " how", " are", " you?")
)

func BenchmarkBareTransportJSON(b *testing.B) {
	srv := benchProvider(b, "application/json", benchJSON)
	base := &http.Transport{}
	b.Cleanup(base.CloseIdleConnections)
	benchRoundTrips(b, base, srv.URL)
}

func BenchmarkTransportJSON(b *testing.B) {
	srv := benchProvider(b, "application/json", benchJSON)
	base := &http.Transport{}
	b.Cleanup(base.CloseIdleConnections)
	benchRoundTrips(b, benchTransport(b, base), srv.URL)
}

func BenchmarkBareTransportSSE(b *testing.B) {
	srv := benchProvider(b, "text/event-stream", benchSSE)
	base := &http.Transport{}
	b.Cleanup(base.CloseIdleConnections)
	benchRoundTrips(b, base, srv.URL)
}

func BenchmarkTransportSSE(b *testing.B) {
	srv := benchProvider(b, "text/event-stream", benchSSE)
	base := &http.Transport{}
	b.Cleanup(base.CloseIdleConnections)
	benchRoundTrips(b, benchTransport(b, base), srv.URL)
}
