package upstream

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/apierr"
)

// refuse answers the 429 for a request no key can take: OpenAI's error
// envelope (which the Anthropic SDK reads too), a fresh X-Request-Id,
// Retry-After the whole seconds, rounded up, until the soonest key that may
// fit has room: at least 1, and at most 60 unless a provider's skip or a
// key's window makes that wait longer, when it is the honest wait (up to
// the window's Per) with X-Should-Retry: false. A request that fits no key
// gets 60 and X-Should-Retry: false. The message names what refused: the
// meter and window of the soonest key's bucket, the provider's limit, or
// the meters and windows whose whole capacity the request exceeds.
func (r *round) refuse() *http.Response {
	maxSecs := int64(llmrate.MaxRetryAfter / time.Second)
	secs, msg := maxSecs, tooLargeMessage(r.tooLarge, r.est)
	if r.waitSet {
		secs = min(max(apierr.CeilSeconds(r.wait), 1), maxSecs)
		if r.wait > llmrate.MaxRetryAfter {
			// A provider's skip or a window longer than a minute (a daily
			// quota) on every key: the honest wait, up to that window (the
			// store caps it so; MaxProviderSkip caps a skip).
			secs = min(apierr.CeilSeconds(r.wait), int64(maxQuotaWait/time.Second))
		}
		msg = r.why.message(secs)
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

// maxQuotaWait is the longest Retry-After: a calendar month of 31 days and
// a DST hour (a key's calendar window waits until its period's start).
const maxQuotaWait = 745 * time.Hour

// refusal is what a key waits on before it has room for a request: the
// provider's skip, or the key's own bucket that refused (its meter, its
// window and its figure).
type refusal struct {
	provider bool
	b        llmrate.Bucket
	w        llmrate.Window // the refusing bucket's window (its identity; zero for a gauge)
	figure   int64
}

// ownRefusal returns the refusal of k's own bucket that d names.
func ownRefusal(k *key, d llmrate.Decision) refusal {
	if d.Refused.Concurrent() {
		return refusal{b: d.Refused, figure: k.Limits.ConcurrentRequests}
	}
	why := refusal{b: d.Refused, w: llmrate.Window{Per: d.Window, Calendar: d.Calendar, Session: d.Session}}
	if why.w.Per == 0 && d.Calendar == llmrate.NoCalendar {
		why.w.Per = time.Minute // a per-minute bucket (a store may leave Window 0)
	}
	for _, w := range k.lim.Windows {
		if w.Per == why.w.Per && w.Calendar == d.Calendar && w.Session == d.Session && (w.Zone == nil && d.Zone == "" || w.Zone != nil && w.Zone.String() == d.Zone) {
			why.w, why.figure = w, w.Figure(d.Refused)
		}
	}
	return why
}

// message is the synthesized 429's message for a wait of secs on why.
func (why refusal) message(secs int64) string {
	switch {
	case why.provider:
		return fmt.Sprintf("Rate limit reached on every upstream key for this request: the provider's rate limit, on the key with room soonest. Please try again in %ds.", secs)
	case why.b.Concurrent():
		return fmt.Sprintf("Rate limit reached for concurrent requests (upstream key): limit %d in flight at once; every upstream key is out of room for this request, and this one has room soonest. Please try again in %ds, once a response in flight has ended.", why.figure, secs)
	}
	return fmt.Sprintf("Rate limit reached for %s (upstream key): limit %d per %s; every upstream key is out of room for this request, and this one has room soonest. Please try again in %ds.",
		meterPhrase(why.b, why.w), why.figure, why.w, secs)
}

// tooLarge is one meter and window whose whole capacity the request
// exceeds on some key: what it needs, and the largest capacity among the
// keys it exceeds so.
type tooLarge struct {
	b         llmrate.Bucket
	w         llmrate.Window // the window's identity
	need, cap int64
}

// noteTooLarge reports whether the request exceeds the whole capacity of
// one of k's buckets (each held to its figure: a key's per-minute figures
// are a one-minute window's), recording the first such meter and window.
// Only the tokens and input tokens meters can be exceeded: a request needs
// 1 of a requests or an output tokens meter, whose figure is at least 1.
func (r *round) noteTooLarge(k *key) bool {
	for _, w := range k.lim.Windows {
		for _, m := range [...]struct {
			b          llmrate.Bucket
			need, have int64
		}{{llmrate.KeyTokens, r.est, w.Tokens}, {llmrate.KeyInputTokens, r.input, w.InputTokens}} {
			if m.have == 0 || m.need <= m.have {
				continue
			}
			for i := range r.tooLarge {
				if tl := &r.tooLarge[i]; tl.b == m.b && tl.w.String() == w.String() {
					tl.cap = max(tl.cap, m.have)
					return true
				}
			}
			r.tooLarge = append(r.tooLarge, tooLarge{m.b, w, m.need, m.have})
			return true
		}
	}
	return false
}

// tooLargeMessage is the message of a request that fits no key: each meter
// and window whose capacity it exceeds (ls, in the keys' order), or, when
// a store said so without a figure that explains it, its estimate.
func tooLargeMessage(ls []tooLarge, est int64) string {
	if len(ls) == 0 {
		return fmt.Sprintf("Request too large for every upstream key: its estimated %d tokens exceed the whole capacity of every key's buckets. Retrying will not help: send a smaller request.", est)
	}
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteString(" or ")
		}
		fmt.Fprintf(&b, "%s (its estimated %d %s exceed a capacity of %d)", meterPhrase(l.b, l.w), l.need, l.b.Meter(), l.cap)
	}
	return "Request too large for every upstream key: it exceeds the whole capacity of every key, for " + b.String() + ". Retrying will not help: send a smaller request."
}

// meterPhrase names a meter and window for a message, as the llmrate
// middleware's 429s do: "requests per day", "input tokens per minute",
// "tokens per 6h0m0s", "tokens per calendar month (UTC)".
func meterPhrase(b llmrate.Bucket, w llmrate.Window) string {
	return b.Meter() + " per " + w.String()
}
