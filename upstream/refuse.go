package upstream

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/apierr"
)

// refuse answers the 429 for a request no key can take: OpenAI's error
// envelope (which the Anthropic SDK reads too), a fresh X-Request-Id,
// Retry-After the whole
// seconds until the soonest key that may fit has room, clamped to 1…60
// (past 60, up to the window, when a window longer than a minute holds
// every key: then with X-Should-Retry: false); 60 and X-Should-Retry:
// false when the request fits no key's bucket at all.
func (r *round) refuse() *http.Response {
	maxSecs := int64(llmrate.MaxRetryAfter / time.Second)
	secs, msg := maxSecs, fmt.Sprintf("Request too large for every upstream key: its estimated %d tokens exceed each key's whole tokens-per-minute capacity. Retrying will not help: send a smaller request.", r.est)
	if r.waitSet {
		secs = min(max(apierr.CeilSeconds(r.wait), 1), maxSecs)
		if r.wait > llmrate.MaxRetryAfter {
			// A window longer than a minute (a daily quota) on every key:
			// the honest wait, up to that window (the store caps it so).
			secs = min(apierr.CeilSeconds(r.wait), int64(llmrate.MaxWindow/time.Second))
		}
		msg = fmt.Sprintf("Rate limit reached on every upstream key for this request. Please try again in %ds.", secs)
	}
	body := apierr.Body("rate_limit_error", "rate_limit_exceeded", msg)
	h := http.Header{
		"Content-Type":          {"application/json"},
		"Content-Length":        {strconv.Itoa(len(body))},
		HeaderRetryAfter:        {strconv.FormatInt(secs, 10)},
		llmrate.HeaderRequestID: {apierr.NewRequestID()},
	}
	if !r.waitSet || secs > maxSecs {
		h.Set(HeaderShouldRetry, "false")
	}
	if ce := r.t.log.Check(zap.DebugLevel, "upstream: no key can take the request"); ce != nil {
		ce.Write(zap.Int64("estimate", r.est), zap.Int64("retry_after_s", secs), zap.Bool("never_fits", !r.waitSet))
	}
	return &http.Response{
		Status:        "429 Too Many Requests",
		StatusCode:    http.StatusTooManyRequests,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r.req,
	}
}
