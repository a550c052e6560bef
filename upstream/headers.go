package upstream

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names the Transport reads on a provider's responses and sets on
// the 429 it synthesizes.
const (
	HeaderRetryAfter   = "Retry-After"
	HeaderRetryAfterMs = "Retry-After-Ms" // OpenAI's, in milliseconds; read before Retry-After
	// HeaderShouldRetry is "false" on a synthesized 429 that retrying will
	// not help; the official OpenAI and Anthropic SDKs honour it.
	HeaderShouldRetry = "X-Should-Retry"
)

// DefaultProviderSkip is how long a key is skipped after a provider 429 that
// says nothing of when the key has room.
const DefaultProviderSkip = time.Second

// MaxProviderSkip bounds how long any provider header can make a key be
// skipped, whatever it says.
const MaxProviderSkip = 24 * time.Hour

// limitFamily is one rate limit a provider reports: its remaining count and
// when it resets.
type limitFamily struct {
	remaining, reset string
	absolute         bool // reset is an RFC 3339 time (Anthropic), else a duration (OpenAI)
}

// families are the rate limits whose headers may say a key has no room.
var families = [...]limitFamily{
	{"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", false},
	{"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", false},
	{"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset", true},
	{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset", true},
	{"Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", true},
	{"Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset", true},
}

// providerSkip reads a provider's response headers and reports how long the
// key must be skipped from now: for a 429, until its Retry-After-Ms or
// Retry-After, else until the latest reset of the limits that say 0
// remaining, else (none says 0: a request too large, or an odd one)
// DefaultProviderSkip, never until the reset of a limit that still has
// room, so that one request does not take a key out of rotation for
// everyone; for any other status, until the reset of the limits that say
// 0 remaining (DefaultProviderSkip when their reset cannot be read), and
// not at all when none does. The result is at most MaxProviderSkip.
func providerSkip(h http.Header, status int, now time.Time) (time.Duration, bool) {
	if status == http.StatusTooManyRequests {
		if d, ok := parseRetryAfterMs(h.Get(HeaderRetryAfterMs)); ok {
			return d, true
		}
		if d, ok := parseRetryAfter(h.Get(HeaderRetryAfter), now); ok {
			return d, true
		}
	}
	var zeroWait time.Duration
	zero, zeroKnown := false, false
	for _, f := range families {
		if n, ok := parseRemaining(h.Get(f.remaining)); ok && n <= 0 {
			zero = true
			if d, ok := parseReset(h.Get(f.reset), f.absolute, now); ok {
				zeroWait, zeroKnown = max(zeroWait, d), true
			}
		}
	}
	switch {
	case zeroKnown:
		return zeroWait, true
	case zero, status == http.StatusTooManyRequests:
		return DefaultProviderSkip, true
	}
	return 0, false
}

// parseRetryAfter reads a Retry-After value (RFC 9110: whole seconds, or an
// HTTP-date) as a wait from now: a date in the past waits 0.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s > int64(MaxProviderSkip/time.Second) {
			return MaxProviderSkip, true // all digits: only too large to parse
		}
		return time.Duration(s) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampWait(t.Sub(now)), true
}

// parseRetryAfterMs reads OpenAI's retry-after-ms: a non-negative number
// of milliseconds, possibly fractional.
func parseRetryAfterMs(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || ms < 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return 0, false
	}
	if ms >= float64(MaxProviderSkip/time.Millisecond) {
		return MaxProviderSkip, true
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// parseReset reads a reset header: an RFC 3339 time (absolute, Anthropic)
// or a Go-style duration such as 6m0s, 1.5s, 120ms (OpenAI), as a wait from
// now. A time in the past waits 0; a negative duration is not a reset.
func parseReset(v string, absolute bool, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if absolute {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return 0, false
		}
		return clampWait(t.Sub(now)), true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, false
	}
	return min(d, MaxProviderSkip), true
}

// parseRemaining reads a remaining count: an integer, possibly negative.
func parseRemaining(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

func clampWait(d time.Duration) time.Duration { return min(max(d, 0), MaxProviderSkip) }

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
