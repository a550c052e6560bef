package llmrate_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// upstreamLimitHeaders are a provider's own rate-limit headers, which
// llmrate's replace.
var upstreamLimitHeaders = map[string]string{
	"X-Ratelimit-Limit-Requests":     "9999",
	"X-Ratelimit-Remaining-Requests": "9998",
	"X-Ratelimit-Remaining-Tokens":   "123456",
	"X-Ratelimit-Reset-Requests":     "1s",
}

// sseFlushing is an OpenAI chat stream (usage 300 + 250 in its last chunk)
// written by a handler that sets its headers and then, per style, writes
// first ("write"), flushes first through http.Flusher ("flush"), or flushes
// first through http.ResponseController ("controller": FlushError).
func sseFlushing(style string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range upstreamLimitHeaders {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch style {
		case "flush":
			w.(http.Flusher).Flush()
		case "controller":
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
		}
		sseUsage(300, 250)(w, r)
	}
}

// rateLimitHeaders returns the response's x-ratelimit-* headers. (Go's
// client moves the Trailer declaration to resp.Trailer: a trailer arrives
// only if declared, so trailerFigures checks the declaration too.)
func rateLimitHeaders(resp *http.Response) map[string]string {
	got := map[string]string{}
	for k, v := range resp.Header {
		if strings.HasPrefix(k, "X-Ratelimit-") {
			got[k] = strings.Join(v, ",")
		}
	}
	return got
}

// TestFlushBeforeFirstWrite: issue 18 item 10. A handler that sets its
// headers and flushes before its first write (a common SSE pattern) gets
// exactly what a handler that writes first gets: llmrate's rate-limit
// headers in place of the upstream's x-ratelimit-*, the Trailer
// declaration and the trailers, over a real HTTP/1.1 connection.
func TestFlushBeforeFirstWrite(t *testing.T) {
	t.Parallel()
	type got struct {
		headers, trailers map[string]string
		body              string
	}
	run := func(style string) got {
		srv := httptest.NewServer(trailerLimiter(t, sseFlushing(style), llmrate.WithRateLimitTrailers(), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI)))
		defer srv.Close()
		resp, body := postTrailers(t, srv.Client(), srv.URL, "k1", "ws")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return got{rateLimitHeaders(resp), trailerFigures(resp), body}
	}
	want := run("write")
	// What the write-first handler gets, in part worked by hand (trailerTiers: key
	// 5 RPM → 10 requests, workspace 20; estimate 400/4 = 100 tokens).
	require.Equal(t, "9", want.headers[llmrate.HeaderRemainingRequests], "llmrate's figure, not the upstream's 9998")
	require.Equal(t, trailerWant[0], want.trailers)
	for _, style := range []string{"flush", "controller"} {
		g := run(style)
		assert.Equal(t, want.headers, g.headers, "%s first: the same rate-limit headers", style)
		assert.Equal(t, want.trailers, g.trailers, "%s first: the same trailers", style)
		assert.Equal(t, want.body, g.body)
	}
}

// TestShadowFlushBeforeFirstWrite: in shadow mode, a handler that flushes
// before its first write shows the would-refuse "0", as one that writes
// first does.
func TestShadowFlushBeforeFirstWrite(t *testing.T) {
	t.Parallel()
	for _, style := range []string{"write", "flush", "controller"} {
		tiny := uniform(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1000})
		h := newHarness(t, sseFlushing(style), llmrate.WithShadow(), llmrate.WithTiers(tiny), llmrate.WithRateLimitHeaders(llmrate.HeadersOpenAI))
		srv := httptest.NewServer(h.h)
		var remaining []string
		for range 3 {
			req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("abcd"))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer sk-shadow")
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			remaining = append(remaining, resp.Header.Get(llmrate.HeaderRemainingRequests))
		}
		srv.Close()
		// A burst of 2 requests: the third would be refused.
		assert.Equal(t, []string{"1", "0", "0"}, remaining, "%s first", style)
		assert.Equal(t, int64(1), h.lim.ShadowRefusals())
	}
}

// flushErrRecorder is a ResponseRecorder with FlushError, as net/http's own
// ResponseWriter has, so the wrapper exposes it (http.ResponseController
// calls it).
type flushErrRecorder struct{ *httptest.ResponseRecorder }

func (w flushErrRecorder) FlushError() error { w.ResponseRecorder.Flush(); return nil }

// TestRetainedWriterFlush: a writer kept past its handler's return cannot
// flush: Flush does nothing (the response it belonged to is not touched)
// and FlushError returns ErrWriterReleased.
func TestRetainedWriterFlush(t *testing.T) {
	t.Parallel()
	l, err := llmrate.New()
	require.NoError(t, err)
	var kept http.ResponseWriter
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		kept = w
		_, _ = io.WriteString(w, "first")
	}))
	w := flushErrRecorder{httptest.NewRecorder()}
	h.ServeHTTP(w, postWithKey("sk-flush"))
	kept.(http.Flusher).Flush()
	assert.False(t, w.Flushed, "a stale Flush reaches nothing")
	assert.ErrorIs(t, http.NewResponseController(kept).Flush(), llmrate.ErrWriterReleased)
	assert.False(t, w.Flushed)
}
