package llmrate

import (
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmrate/llmrate/internal/apierr"
	"github.com/llmrate/llmrate/internal/calendar"
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
	// left. A meter that is Unlimited in both scopes has no headers. On a
	// 429 refused by a window (a daily or monthly quota, a window's input or
	// output meter), that window reports in the matching meter's headers
	// (requests, or tokens for the tokens, input and output meters): limit
	// its figure, remaining its level, reset the time until the request
	// fits, so that the headers never show a full budget beside a refusal.
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
	// or the workspace's, whichever has less left. A calendar window's item
	// is named by meter and period ("tokens-month", "requests-day",
	// "tokens-week"), w the current period's real length in seconds (a
	// 25 h day: 90000) and t the seconds to its end; a session window's
	// "tokens-session-18000", w its Per and t the seconds to the open
	// session's end (0 when none is open). Where two items would share a
	// name (one calendar in two zones, a plan's window beside an entry's of
	// one Per), the later one gains a suffix: its zone's name or "-entry".
	// An Unlimited meter has no item. HeadersOpenAI stays the per-minute
	// buckets' (what OpenAI itself sends), but for a window's refusal.
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
// admission a; ok is false when both are Unlimited (no bucket).
func binding(a *admission, k, w Bucket) (rem, capacity int64, reset time.Duration, ok bool) {
	kr, wr := k.PerMinute(a.kl, a.wl), w.PerMinute(a.kl, a.wl)
	b := w
	switch {
	case kr == Unlimited && wr == Unlimited:
		return 0, 0, 0, false
	case wr == Unlimited, kr != Unlimited && a.d.Remaining[k] < a.d.Remaining[w]:
		b = k
	}
	rem, rate := a.d.Remaining[b], b.PerMinute(a.kl, a.wl)
	capacity = 2 * rate
	return max(rem, 0), capacity, timeToFull(rem, rate), true
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
	rr, rc, rt, rok := binding(a, KeyRequests, WorkspaceRequests)
	tr, tc, tt, tok := binding(a, KeyTokens, WorkspaceTokens)
	switch l.cfg.headers {
	case HeadersOpenAI:
		if !a.d.Allowed && !a.d.NeverFits {
			if w, _, ok := refusingWindow(a); ok {
				// The refusing window reports in its meter's headers.
				f, rem, reset := w.Figure(a.d.Refused), refusedLevel(a, w), a.d.RetryAfter
				if a.d.Refused == KeyRequests || a.d.Refused == WorkspaceRequests {
					rc, rr, rt, rok = f, rem, reset, true
				} else {
					tc, tr, tt, tok = f, rem, reset, true
				}
			}
		}
		if rok {
			h[HeaderLimitRequests] = []string{strconv.FormatInt(rc, 10)}
			h[HeaderRemainingRequests] = []string{strconv.FormatInt(rr, 10)}
			h[HeaderResetRequests] = []string{rt.String()}
		}
		if tok {
			h[HeaderLimitTokens] = []string{strconv.FormatInt(tc, 10)}
			h[HeaderRemainingTokens] = []string{strconv.FormatInt(tr, 10)}
			h[HeaderResetTokens] = []string{tt.String()}
		}
	case HeadersIETF:
		var policy, state []string
		if rok {
			policy = append(policy, `"requests";q=`+strconv.FormatInt(rc, 10)+`;w=120`)
			state = append(state, `"requests";r=`+strconv.FormatInt(rr, 10)+`;t=`+strconv.FormatInt(ceilSeconds(rt), 10))
		}
		if tok {
			policy = append(policy, `"tokens";q=`+strconv.FormatInt(tc, 10)+`;w=120`)
			state = append(state, `"tokens";r=`+strconv.FormatInt(tr, 10)+`;t=`+strconv.FormatInt(ceilSeconds(tt), 10))
		}
		if a.windowed() {
			for _, it := range windowItems(a) {
				p := `"` + it.name + `";q=` + strconv.FormatInt(it.q, 10)
				if it.w > 0 && it.w%time.Second == 0 { // w is an Integer of seconds: a window of 1.5 s goes without
					p += `;w=` + strconv.FormatInt(int64(it.w/time.Second), 10)
				}
				policy = append(policy, p)
				state = append(state, `"`+it.name+`";r=`+strconv.FormatInt(max(it.level, 0), 10)+`;t=`+strconv.FormatInt(ceilSeconds(it.t), 10))
			}
		}
		if len(policy) > 0 {
			h[HeaderRateLimitPolicy] = []string{strings.Join(policy, ", ")}
			h[HeaderRateLimit] = []string{strings.Join(state, ", ")}
		}
	}
}

// refusedLevel is the whole level of the refusing window's bucket, at
// least 0.
func refusedLevel(a *admission, w Window) int64 {
	l, _ := refusedLevels(a, w)
	return max(l.Level(a.d.Refused), 0)
}

// refusedLevels returns the refusing window w's levels, as the store
// reported them.
func refusedLevels(a *admission, w Window) (WindowLevels, bool) {
	b := a.d.Refused
	pk, pw := a.lentLimits()
	kpl, wpl := a.d.planLevels()
	levels := a.d.KeyWindows
	lim := a.kl
	if a.d.Lent {
		levels, lim = kpl, pk
	}
	if b.Scope() == "workspace" {
		levels, lim = a.d.WorkspaceWindows, a.wl
		if a.d.Lent {
			levels, lim = wpl, pw
		}
	}
	if a.solo && b.Scope() == "key" && len(levels) == 0 {
		levels = a.d.WorkspaceWindows
		if a.d.Lent {
			levels = wpl
		}
	}
	for i, v := range lim.Windows {
		if sameWindow(v, w) && i < len(levels) {
			return levels[i], true
		}
	}
	return WindowLevels{}, false
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
	name     string // e.g. "requests-86400", "input_tokens-60", "tokens-month"
	id       Window // the window's identity (figures zeroed), and whether lent
	lent     bool
	w        time.Duration // the item's w: the window, the period's length; 0: none
	t        time.Duration // the time until the bucket is full (a calendar window: its period's end)
	q, level int64
}

// windowItems lists a's window buckets (the key's windows in order, then
// the workspace's that the key lacks; the plan's lent windows before an
// entry's own), each meter and window once: where both scopes have it,
// the one with less left.
func windowItems(a *admission) []windowItem {
	var items []windowItem
	type set struct {
		l      Limits
		levels []WindowLevels
		lent   bool
	}
	pk, pw := a.lentLimits()
	kpl, wpl := a.d.planLevels()
	sets := [2][2]set{
		{{pk, kpl, true}, {a.kl, a.d.KeyWindows, false}},
		{{pw, wpl, true}, {a.wl, a.d.WorkspaceWindows, false}},
	}
	for scope := range sets {
		for _, st := range sets[scope] {
			for i, w := range st.l.Windows {
				for m, b := range WindowMeters()[scope] {
					q := w.Figure(b)
					if q == 0 {
						continue
					}
					level, reset := q, time.Time{}
					if i < len(st.levels) {
						level, reset = st.levels[i].Level(b), st.levels[i].ResetAt()
					}
					it := windowItem{id: Window{Per: w.Per, Calendar: w.Calendar, Zone: w.Zone, Session: w.Session}, lent: st.lent, q: q, level: level}
					it.name, it.w, it.t = itemShape(a, w, m, level, q, reset)
					items = addItem(items, it)
				}
			}
		}
	}
	return items
}

// itemShape names a window's item and gives its w and t.
func itemShape(a *admission, w Window, m int, level, q int64, reset time.Time) (name string, width, t time.Duration) {
	meter := [4]string{"requests", "tokens", "input_tokens", "output_tokens"}[m]
	switch {
	case w.Calendar != NoCalendar:
		// The store's clock decides the period (Redis: the server's): its
		// end, when the store told it, names the period, not this
		// process's clock.
		start, end := periodOf(w, a.now)
		if !reset.IsZero() {
			start, end = periodOf(w, reset.Add(-time.Nanosecond))
		}
		return meter + "-" + w.Calendar.String(), end.Sub(start), max(end.Sub(a.now), 0)
	case w.Session:
		if !reset.IsZero() {
			t = max(reset.Sub(a.now), 0)
		} else if level < q {
			t = w.Per // open, its end unknown: at most Per
		}
		return meter + "-session-" + windowItemSuffix(w.Per), w.Per, t
	}
	return meter + "-" + windowItemSuffix(w.Per), w.Per, windowToFull(level, q, w.Per)
}

// addItem adds it to items: merged with the item of the same window and
// meter of the other scope (the one with less left), or under a name
// made unique (a zone's name or "-entry" added) where another window took
// its name.
func addItem(items []windowItem, it windowItem) []windowItem {
	for j := range items {
		if items[j].name != it.name {
			continue
		}
		if sameWindow(items[j].id, it.id) && items[j].lent == it.lent {
			if it.level < items[j].level {
				items[j].q, items[j].level, items[j].t = it.q, it.level, it.t
			}
			return items
		}
		switch {
		case it.id.Calendar != NoCalendar && zoneName(items[j].id.Zone) != zoneName(it.id.Zone):
			it.name += "-" + zoneName(it.id.Zone)
		default:
			it.name += "-entry"
		}
		return addItem(items, it)
	}
	return append(items, it)
}

// periodOf is calendar window w's period in force at now: [start, end).
func periodOf(w Window, now time.Time) (start, end time.Time) {
	return periods.Period(calendar.Kind(w.Calendar), w.Zone, now)
}

// periods memoizes the calendar periods the limiter shows.
var periods calendar.Cache

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
