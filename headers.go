package llmrate

import (
	"math/bits"
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
	// r = remaining and t = seconds until full. Each window bucket
	// (Limits.Windows) adds its own item to both, named by meter and window
	// in seconds ("requests-86400", "tokens-3600", "input_tokens-60",
	// "output_tokens-60"; a window that is not whole seconds in
	// milliseconds, "requests-1500ms", and without w, which the draft
	// makes an Integer), with q = its figure and w = its window: the key's
	// or the workspace's, whichever has less left. HeadersOpenAI stays the
	// per-minute buckets' (what OpenAI itself sends).
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
		policy := `"requests";q=` + strconv.FormatInt(rc, 10) + `;w=120, "tokens";q=` + strconv.FormatInt(tc, 10) + `;w=120`
		state := `"requests";r=` + strconv.FormatInt(rr, 10) + `;t=` + strconv.FormatInt(ceilSeconds(rt), 10) +
			`, "tokens";r=` + strconv.FormatInt(tr, 10) + `;t=` + strconv.FormatInt(ceilSeconds(tt), 10)
		if windowed(a.kl, a.wl) {
			for _, it := range windowItems(a) {
				policy += `, "` + it.name + `";q=` + strconv.FormatInt(it.q, 10)
				if it.per%time.Second == 0 { // w is an Integer of seconds: a window of 1.5 s goes without
					policy += `;w=` + strconv.FormatInt(int64(it.per/time.Second), 10)
				}
				state += `, "` + it.name + `";r=` + strconv.FormatInt(max(it.level, 0), 10) + `;t=` + strconv.FormatInt(ceilSeconds(windowToFull(it.level, it.q, it.per)), 10)
			}
		}
		h[HeaderRateLimitPolicy] = []string{policy}
		h[HeaderRateLimit] = []string{state}
	}
}

// windowItemSuffix names a window in a policy item: its whole seconds
// ("86400"), or its milliseconds for one that is not whole seconds
// ("1500ms").
func windowItemSuffix(per time.Duration) string {
	if per%time.Second == 0 {
		return strconv.FormatInt(int64(per/time.Second), 10)
	}
	return strconv.FormatInt(per.Milliseconds(), 10) + "ms"
}

// windowItem is one window bucket as a RateLimit policy item: the binding
// one of the key's and the workspace's of one meter and window.
type windowItem struct {
	name     string // e.g. "requests-86400", "input_tokens-60"
	per      time.Duration
	q, level int64
}

// windowItems lists a's window buckets (the key's windows in order, then
// the workspace's that the key lacks), each meter and window once: where
// both scopes have it, the one with less left.
func windowItems(a *admission) []windowItem {
	var items []windowItem
	for scope, l := range [2]Limits{a.kl, a.wl} {
		levels := a.d.KeyWindows
		if scope == 1 {
			levels = a.d.WorkspaceWindows
		}
		for i, w := range l.Windows {
			for m, b := range WindowMeters()[scope] {
				q := w.Figure(b)
				if q == 0 {
					continue
				}
				var level int64 = q
				if i < len(levels) {
					level = levels[i].Level(b)
				}
				name := [4]string{"requests", "tokens", "input_tokens", "output_tokens"}[m] + "-" + windowItemSuffix(w.Per)
				found := false
				for j := range items {
					if items[j].name == name {
						found = true
						if level < items[j].level {
							items[j].q, items[j].level = q, level
						}
					}
				}
				if !found {
					items = append(items, windowItem{name: name, per: w.Per, q: q, level: level})
				}
			}
		}
	}
	return items
}

// windowToFull is the time a window bucket at whole level rem needs to
// refill to q at q per per, rounded up to the nanosecond (an upper bound,
// as timeToFull: the fraction already accrued is not counted).
func windowToFull(rem, q int64, per time.Duration) time.Duration {
	if rem >= q {
		return 0
	}
	need := min(q-rem, 3*q) // debt is floored at -2q
	hi, lo := bits.Mul64(uint64(need), uint64(per))
	d, r := bits.Div64(hi, lo, uint64(q)) // need <= 3q: the quotient is at most 3×per
	if r != 0 {
		d++
	}
	return time.Duration(d)
}

func ceilSeconds(d time.Duration) int64 { return apierr.CeilSeconds(d) }
