package upstream

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestParseReset(t *testing.T) {
	for _, tc := range []struct {
		v        string
		absolute bool
		want     time.Duration
		ok       bool
	}{
		{"6m0s", false, 6 * time.Minute, true},
		{"1.5s", false, 1500 * time.Millisecond, true},
		{"120ms", false, 120 * time.Millisecond, true},
		{"20ms", false, 20 * time.Millisecond, true},
		{"1s", false, time.Second, true},
		{"1m2.25s", false, 62250 * time.Millisecond, true},
		{" 7.66s ", false, 7660 * time.Millisecond, true},
		{"0s", false, 0, true},
		{"-1s", false, 0, false},
		{"soon", false, 0, false},
		{"12", false, 0, false}, // a bare number is not a Go duration
		{"1000h", false, MaxProviderSkip, true},
		{"", false, 0, false},
		{"2026-03-01T12:00:30Z", true, 30 * time.Second, true},
		{"2026-03-01T12:00:00.25Z", true, 250 * time.Millisecond, true},
		{"2026-03-01T13:00:30+01:00", true, 30 * time.Second, true},
		{"2026-03-01T11:59:00Z", true, 0, true}, // past: no wait
		{"2027-03-01T12:00:00Z", true, MaxProviderSkip, true},
		{"6m0s", true, 0, false},
		{"Sun, 01 Mar 2026 12:00:30 GMT", true, 0, false},
	} {
		got, ok := parseReset(tc.v, tc.absolute, t0)
		assert.Equal(t, tc.ok, ok, "parseReset(%q, %v)", tc.v, tc.absolute)
		assert.Equal(t, tc.want, got, "parseReset(%q, %v)", tc.v, tc.absolute)
	}
}

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"12", 12 * time.Second, true},
		{"0", 0, true},
		{" 3 ", 3 * time.Second, true},
		{"Sun, 01 Mar 2026 12:01:30 GMT", 90 * time.Second, true},
		{"Sunday, 01-Mar-26 12:00:05 GMT", 5 * time.Second, true}, // RFC 850
		{"Sun Mar  1 12:00:07 2026", 7 * time.Second, true},       // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"99999999999999999999999", MaxProviderSkip, true},
		{"86401", MaxProviderSkip, true},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"", 0, false},
		{"later", 0, false},
	} {
		got, ok := parseRetryAfter(tc.v, t0)
		assert.Equal(t, tc.ok, ok, "parseRetryAfter(%q)", tc.v)
		assert.Equal(t, tc.want, got, "parseRetryAfter(%q)", tc.v)
	}
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"1500", 1500 * time.Millisecond, true},
		{"20.5", 20500 * time.Microsecond, true},
		{"-1", 0, false},
		{"NaN", 0, false},
		{"+Inf", 0, false},
		{"1e12", MaxProviderSkip, true},
	} {
		got, ok := parseRetryAfterMs(tc.v)
		assert.Equal(t, tc.ok, ok, "parseRetryAfterMs(%q)", tc.v)
		assert.Equal(t, tc.want, got, "parseRetryAfterMs(%q)", tc.v)
	}
}

func TestProviderSkip(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		h      http.Header
		status int
		want   time.Duration
		skip   bool
	}{
		{"200, no headers", h(), 200, 0, false},
		{"200, room left", h("x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "1s"), 200, 0, false},
		{"200, 0 requests", h("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s"), 200, time.Second, true},
		{"200, both 0: the later reset", h("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"), 200, 6 * time.Minute, true},
		{"200, only the 0 one's reset counts", h("x-ratelimit-remaining-requests", "9", "x-ratelimit-reset-requests", "9m", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "2s"), 200, 2 * time.Second, true},
		{"200, 0 without reset", h("anthropic-ratelimit-tokens-remaining", "0"), 200, DefaultProviderSkip, true},
		{"200, Retry-After ignored", h("retry-after", "30"), 200, 0, false},
		{"429, Retry-After", h("retry-after", "30", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1s"), 429, 30 * time.Second, true},
		{"429, no Retry-After: resets", h("anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", "2026-03-01T12:00:09Z"), 429, 9 * time.Second, true},
		{"429, none at 0: 1 s, not a reset of a limit with room", h("x-ratelimit-remaining-tokens", "10", "x-ratelimit-reset-tokens", "4s", "x-ratelimit-remaining-requests", "10", "x-ratelimit-reset-requests", "3s"), 429, DefaultProviderSkip, true},
		{"429, nothing", h(), 429, DefaultProviderSkip, true},
	} {
		got, skip := providerSkip(tc.h, tc.status, t0)
		assert.Equal(t, tc.skip, skip, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

// FuzzProviderHeaders: the header parsers never panic, and every wait they
// give is within [0, MaxProviderSkip].
func FuzzProviderHeaders(f *testing.F) {
	for _, s := range []string{"6m0s", "1.5s", "120ms", "20ms", "12", "Sun, 01 Mar 2026 12:01:30 GMT", "2026-03-01T12:00:30Z",
		"2026-03-01T12:00:00.123456789+14:00", "-1", "0", "1e400", "NaN", "9223372036854775807ns", "99999999999h", ""} {
		f.Add(s, s, 429)
	}
	f.Add("0", "1s", 200)
	f.Fuzz(func(t *testing.T, a, b string, status int) {
		for _, abs := range []bool{false, true} {
			if d, ok := parseReset(a, abs, t0); ok && (d < 0 || d > MaxProviderSkip) {
				t.Fatalf("parseReset(%q, %v) = %v", a, abs, d)
			}
		}
		if d, ok := parseRetryAfter(a, t0); ok && (d < 0 || d > MaxProviderSkip) {
			t.Fatalf("parseRetryAfter(%q) = %v", a, d)
		}
		if d, ok := parseRetryAfterMs(a); ok && (d < 0 || d > MaxProviderSkip) {
			t.Fatalf("parseRetryAfterMs(%q) = %v", a, d)
		}
		h := http.Header{}
		for _, fam := range families {
			h.Set(fam.remaining, a)
			h.Set(fam.reset, b)
		}
		h.Set(HeaderRetryAfter, b)
		d, skip := providerSkip(h, status, t0)
		if d < 0 || d > MaxProviderSkip || !skip && d != 0 {
			t.Fatalf("providerSkip(%q, %q, %d) = %v, %v", a, b, status, d, skip)
		}
		if status == http.StatusTooManyRequests && !skip {
			t.Fatalf("a 429 always skips")
		}
	})
}

// The terminal event is found whatever the read boundaries and line
// endings, and only once its event is whole.
func TestTerminal(t *testing.T) {
	for _, tc := range []struct {
		stream string
		want   bool
	}{
		{"data: {\"x\":1}\n\ndata: [DONE]\n\n", true},
		{"data: [DONE]\r\n\r\n", true},
		{"data:[DONE]\r\r", true},
		{"data: [DONE]\n", false}, // its event not yet whole
		{"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{"data: {\"type\":\"message_stop\"}\n\n", true},
		{"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n", true},
		{"data: [DONE] \n\n", false},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"\\ndata: [DONE]\\n\\n\"}}]}\n\n", false}, // look-alike text inside content
		{": data: [DONE]\n\n", false},
		{"event: message_stopped\n\n", false},
		{"event: message_start\ndata: {\"type\":\"message_start\"}\n\n", false},
	} {
		for step := 1; step <= len(tc.stream); step++ {
			var term terminal
			for i := 0; i < len(tc.stream); i += step {
				term.write([]byte(tc.stream[i:min(i+step, len(tc.stream))]))
			}
			if !assert.Equal(t, tc.want, term.seen, "%q in pieces of %d", tc.stream, step) {
				break
			}
		}
	}
	long := "data: " + strings.Repeat("x", 100) + "\n\n"
	var term terminal
	term.write([]byte(long + "data: [DONE]\n\n"))
	assert.True(t, term.seen, "after a long line")
}

// FuzzTerminal: how a stream is cut into reads never changes whether its
// terminal event is found.
func FuzzTerminal(f *testing.F) {
	f.Add("data: {}\n\ndata: [DONE]\n\n", uint8(3))
	f.Add("event: message_stop\r\ndata: {}\r\n\r\n", uint8(1))
	f.Fuzz(func(t *testing.T, s string, step uint8) {
		var whole, pieces terminal
		whole.write([]byte(s))
		n := int(step%16) + 1
		for i := 0; i < len(s); i += n {
			pieces.write([]byte(s[i:min(i+n, len(s))]))
		}
		if whole.seen != pieces.seen {
			t.Fatalf("%q: whole %v, in pieces of %d %v", s, whole.seen, n, pieces.seen)
		}
	})
}
