package llmrate

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmrate/llmrate/internal/apierr"
)

// Header names llmrate writes, in canonical form.
const (
	HeaderRetryAfter = "Retry-After"
	HeaderRequestID  = "X-Request-Id"

	HeaderLimitRequests     = "X-Ratelimit-Limit-Requests"
	HeaderRemainingRequests = "X-Ratelimit-Remaining-Requests"
	HeaderResetRequests     = "X-Ratelimit-Reset-Requests"
	HeaderLimitTokens       = "X-Ratelimit-Limit-Tokens"
	HeaderRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	HeaderResetTokens       = "X-Ratelimit-Reset-Tokens"

	HeaderRateLimitPolicy = "Ratelimit-Policy"
	HeaderRateLimit       = "Ratelimit"
)

// HeaderStyle selects the rate-limit headers written on admitted responses
// and on the 429.
type HeaderStyle uint8

const (
	// HeadersNone writes no rate-limit headers (the default) and leaves the
	// upstream's own untouched.
	HeadersNone HeaderStyle = iota
	// HeadersOpenAI writes x-ratelimit-{limit,remaining,reset}-{requests,tokens}.
	// Limit is the bucket's capacity (2× the per-minute figure), remaining its
	// whole level after this request, reset the time until it is full again,
	// in OpenAI's duration format ("1.2s", "6m0s"). Each dimension reports
	// the binding bucket: the key's or the workspace's, whichever has less
	// left.
	HeadersOpenAI
	// HeadersIETF writes RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers): policies "requests" and
	// "tokens" with q = capacity, w = 120 (seconds to refill from empty),
	// r = remaining and t = seconds until full.
	HeadersIETF
)

// WithRateLimitHeaders turns on rate-limit headers. When on, the upstream
// provider's own rate-limit headers (which describe the gateway operator's
// provider account) are removed from admitted responses, never leaked. A
// provider's own 429 is the exception, whatever the style: it is relayed
// untouched, with its own Retry-After and rate-limit headers and none of
// llmrate's.
func WithRateLimitHeaders(s HeaderStyle) Option {
	return optionFunc(func(c *config) { c.headers = s })
}

// binding returns the remaining level, capacity and time-to-full of the
// bucket with less left among key bucket k and workspace bucket w, of
// admission a.
func binding(a *admission, k, w Bucket) (rem, capacity int64, reset time.Duration) {
	b := w
	if a.d.Remaining[k] < a.d.Remaining[w] {
		b = k
	}
	rem, rate := a.d.Remaining[b], b.PerMinute(a.kl, a.wl)
	capacity = 2 * rate
	return max(rem, 0), capacity, timeToFull(rem, rate)
}

// timeToFull is the time a bucket at whole level rem needs to refill to
// 2*rate, rounded up to the millisecond (an upper bound: the fraction of a
// unit already accrued is not counted).
func timeToFull(rem, rate int64) time.Duration {
	capacity := 2 * rate
	if rem >= capacity {
		return 0
	}
	need := capacity - rem // debt is floored at -2*capacity: need <= 3*capacity
	if need > (1<<63-1-rate)/60_000 {
		return 6 * time.Minute // beyond any reachable level; keeps the product in range
	}
	return time.Duration((need*60_000+rate-1)/rate) * time.Millisecond
}

// removeRateLimitHeaders deletes upstream rate-limit headers.
func removeRateLimitHeaders(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, "X-Ratelimit-") || k == HeaderRateLimit || k == HeaderRateLimitPolicy {
			delete(h, k)
		}
	}
}

// setRateLimitHeaders writes the configured headers for a decision.
func (l *Limiter) setRateLimitHeaders(h http.Header, a *admission) {
	removeRateLimitHeaders(h)
	rr, rc, rt := binding(a, KeyRequests, WorkspaceRequests)
	tr, tc, tt := binding(a, KeyTokens, WorkspaceTokens)
	switch l.cfg.headers {
	case HeadersOpenAI:
		h[HeaderLimitRequests] = []string{strconv.FormatInt(rc, 10)}
		h[HeaderRemainingRequests] = []string{strconv.FormatInt(rr, 10)}
		h[HeaderResetRequests] = []string{rt.String()}
		h[HeaderLimitTokens] = []string{strconv.FormatInt(tc, 10)}
		h[HeaderRemainingTokens] = []string{strconv.FormatInt(tr, 10)}
		h[HeaderResetTokens] = []string{tt.String()}
	case HeadersIETF:
		h[HeaderRateLimitPolicy] = []string{`"requests";q=` + strconv.FormatInt(rc, 10) + `;w=120, "tokens";q=` + strconv.FormatInt(tc, 10) + `;w=120`}
		h[HeaderRateLimit] = []string{`"requests";r=` + strconv.FormatInt(rr, 10) + `;t=` + strconv.FormatInt(ceilSeconds(rt), 10) +
			`, "tokens";r=` + strconv.FormatInt(tr, 10) + `;t=` + strconv.FormatInt(ceilSeconds(tt), 10)}
	}
}

func ceilSeconds(d time.Duration) int64 { return apierr.CeilSeconds(d) }
