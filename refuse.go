package llmrate

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/llmrate/llmrate/internal/apierr"
)

// retryAfterSeconds turns a refusal into the Retry-After value: whole
// seconds until the request fits in every bucket, rounded up, at least 1;
// at most 60 for the per-minute buckets and rolling windows up to a
// minute, past 60 when a longer window makes the request wait longer (the
// store caps that wait at the window's Per, a calendar window's at its
// period's end: here at maxQuotaWait); 60 when it can never fit.
func retryAfterSeconds(d Decision) int64 {
	if d.NeverFits {
		return int64(MaxRetryAfter / time.Second)
	}
	s := ceilSeconds(d.RetryAfter)
	if d.RetryAfter > MaxRetryAfter {
		return min(s, int64(maxQuotaWait/time.Second))
	}
	return min(max(s, 1), int64(MaxRetryAfter/time.Second))
}

// maxQuotaWait is the longest wait a refusal reports: a calendar month of
// 31 days and a DST hour.
const maxQuotaWait = 745 * time.Hour

// HeaderShouldRetry is "false" on a 429 whose Retry-After exceeds 60
// seconds (a window longer than a minute, e.g. a daily quota, is spent) and
// on a 429 for a request that never fits: the official OpenAI and
// Anthropic SDKs then hand the wait to the caller instead of sleeping and
// resending. It is absent otherwise.
const HeaderShouldRetry = "X-Should-Retry"

// writeError writes an OpenAI-shaped error. The message never quotes the
// key or any other client input.
func writeError(w http.ResponseWriter, r *http.Request, status int, typ, code, msg string) {
	body := apierr.Body(typ, code, msg)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(HeaderRequestID, requestID(r))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// refuse writes the 429 for a refused admission. Nothing is forwarded.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, a *admission) {
	secs := retryAfterSeconds(a.d)
	h := w.Header()
	h.Set(HeaderRetryAfter, strconv.FormatInt(secs, 10))
	if secs > int64(MaxRetryAfter/time.Second) || a.d.NeverFits {
		h.Set(HeaderShouldRetry, "false")
	}
	if l.cfg.headers != HeadersNone {
		l.setRateLimitHeaders(h, a)
	}
	msg := refusalMessage(a, secs, l.cfg.docsURL)
	if ce := l.debug.Check(zap.DebugLevel, "llmrate: refused"); ce != nil {
		ce.Write(fieldsRefused(a, secs)...)
	}
	writeError(w, r, http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", msg)
}

func refusalMessage(a *admission, secs int64, docs string) string {
	if a.d.NeverFits {
		return neverFitsMessage(a, docs)
	}
	b := a.d.Refused
	if b.Concurrent() {
		return concurrencyMessage(a, b, secs, docs)
	}
	if w, lent, ok := refusingWindow(a); ok {
		return windowMessage(a, b, w, lent, secs, docs)
	}
	dim, figure := "requests", b.PerMinute(a.kl, a.wl)
	if b.Tokens() {
		dim = "tokens"
	}
	if a.entry != "" {
		// The model is named as configured (an operator's entry, never the
		// client's text): a prefix entry's models share its limit.
		where := "in this workspace"
		if b.Scope() == "key" {
			where = "for this API key"
		}
		return fmt.Sprintf("Rate limit reached for %s %s on %s per minute %s: limit %d per minute, burst %d%s. Please try again in %ds.%s",
			a.entry, where, dim, planPhrase(a), figure, 2*figure, reserveClause(a), secs, seeDocs(docs))
	}
	return fmt.Sprintf("Rate limit reached for %s per minute (%s) %s: limit %d per minute, burst %d%s. Please try again in %ds.%s",
		dim, b.Scope(), planPhrase(a), figure, 2*figure, reserveClause(a), secs, seeDocs(docs))
}

// planWord is what the figures are sold as: "plan" under WithPlans, else
// "tier".
func planWord(a *admission) string {
	if a.named {
		return "plan"
	}
	return "tier"
}

// planPhrase says where the figures of a refusal come from.
func planPhrase(a *admission) string {
	if a.overridden {
		return "under this workspace's own limits"
	}
	return "on the " + a.plan + " " + planWord(a)
}

// requestID returns the request's X-Request-Id if it is safe to echo (1–128
// bytes of [A-Za-z0-9._:-]), else a new random one, so a header value can
// never inject anything into the 429.
func requestID(r *http.Request) string {
	if id := headerGet(r.Header, HeaderRequestID); id != "" && len(id) <= 128 {
		ok := true
		for i := 0; i < len(id) && ok; i++ {
			c := id[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		}
		if ok {
			return id
		}
	}
	return apierr.NewRequestID()
}

// concurrencyMessage is the 429 message of a gauge's refusal.
func concurrencyMessage(a *admission, b Bucket, secs int64, docs string) string {
	figure := b.Figure(a.kl, a.wl)
	if a.d.Lent {
		figure = b.Figure(a.lentLimits())
	}
	if a.entry != "" && !a.d.Lent {
		where := "in this workspace"
		if b.Scope() == "key" {
			where = "for this API key"
		}
		return fmt.Sprintf("Rate limit reached for %s %s on concurrent requests %s: limit %d in flight at once%s. Please try again in %ds, once a response in flight has ended.%s",
			a.entry, where, planPhrase(a), figure, reserveClause(a), secs, seeDocs(docs))
	}
	return fmt.Sprintf("Rate limit reached for concurrent requests (%s) %s: limit %d in flight at once%s. Please try again in %ds, once a response in flight has ended.%s",
		b.Scope(), planPhrase(a), figure, reserveClause(a), secs, seeDocs(docs))
}

// refusingWindow returns the window whose bucket refused a, and whether it
// is the plan's lent to an entry's request (Decision.Lent): a window's
// input or output meter, a calendar or session window, a window longer or
// shorter than a minute, or a one-minute window's requests or tokens meter
// when the per-minute bucket of that name had room (it is checked first,
// and a refusal debits nothing: its level is in Remaining) or is
// Unlimited. The window is found by its identity (scope, Per, Calendar,
// zone, Session).
func refusingWindow(a *admission) (w Window, lent, ok bool) {
	b, d := a.d.Refused, a.d
	if b.Concurrent() || d.Window == 0 && d.Calendar == NoCalendar {
		return Window{}, false, false
	}
	if d.Window == time.Minute && d.Calendar == NoCalendar && !d.Session && !d.Lent && b < KeyConcurrent {
		if rate := b.PerMinute(a.kl, a.wl); rate != Unlimited && rate != 0 {
			need := int64(1)
			if b.Tokens() {
				need = a.est
			}
			// Above the floor of the request's priority reserve, if any.
			capacity := 2 * rate
			need = min(need, capacity+1) + ReserveFloor(a.reserve, capacity)
			if d.Remaining[b] < need {
				return Window{}, false, false
			}
		}
	}
	kl, wl := a.kl, a.wl
	if d.Lent {
		kl, wl = a.lentLimits()
	}
	ws := kl.Windows
	if b.Scope() == "workspace" {
		ws = wl.Windows
	}
	for _, w := range ws {
		if w.Per == d.Window && w.Calendar == d.Calendar && w.Session == d.Session && zoneName(w.Zone) == d.Zone && w.Figure(b) > 0 {
			return w, d.Lent, true
		}
	}
	return Window{}, false, false
}

// meterPhrase names a window's meter and window for a message: "requests
// per day", "input tokens per minute", "tokens per 6h0m0s", "tokens per
// calendar month (Europe/Berlin)", "requests per 5h0m0s session".
func meterPhrase(b Bucket, w Window) string {
	return b.Meter() + " per " + windowPhrase(w)
}

// windowPhrase names a window after "per": "day", "calendar day (UTC)",
// "5h0m0s session".
func windowPhrase(w Window) string {
	switch {
	case w.Calendar != NoCalendar:
		return "calendar " + w.Calendar.String() + " (" + zoneName(w.Zone) + ")"
	case w.Session:
		return windowName(w.Per) + " session"
	}
	return windowName(w.Per)
}

// resetClause states when a wait past an hour ends: " (at 2027-01-01T00:00:00+01:00)",
// in the window's zone for a calendar window, else UTC.
func resetClause(a *admission, w Window, secs int64) string {
	if secs <= 3600 || a.now.IsZero() {
		return ""
	}
	at := a.now.Add(time.Duration(secs) * time.Second)
	if w.Calendar != NoCalendar && w.Zone != nil {
		// The period's start by the store's clock (Redis: the server's),
		// when that is what the wait is for: this process's clock may be
		// off the store's by a few minutes; a longer wait is another
		// bucket's.
		if l, ok := refusedLevels(a, w); ok && l.Reset != 0 && at.Sub(l.ResetAt()).Abs() < time.Hour {
			at = l.ResetAt()
		}
		at = at.In(w.Zone)
	} else {
		at = at.UTC()
	}
	return " (at " + at.Format(time.RFC3339) + ")"
}

// windowMessage is the 429 message of a window's refusal.
func windowMessage(a *admission, b Bucket, w Window, lent bool, secs int64, docs string) string {
	figure, per := w.Figure(b), windowPhrase(w)
	if a.entry != "" && !lent {
		where := "in this workspace"
		if b.Scope() == "key" {
			where = "for this API key"
		}
		return fmt.Sprintf("Rate limit reached for %s %s on %s %s: limit %d per %s%s. Please try again in %ds%s.%s",
			a.entry, where, meterPhrase(b, w), planPhrase(a), figure, per, reserveClause(a), secs, resetClause(a, w, secs), seeDocs(docs))
	}
	return fmt.Sprintf("Rate limit reached for %s (%s) %s: limit %d per %s%s. Please try again in %ds%s.%s",
		meterPhrase(b, w), b.Scope(), planPhrase(a), figure, per, reserveClause(a), secs, resetClause(a, w, secs), seeDocs(docs))
}

// stage is one bucket a request spends, for a message: what it needs of
// it and its whole capacity; w is the bucket's window (zero: the
// per-minute bucket).
type stage struct {
	b         Bucket
	w         Window
	need, cap int64
}

// stages lists the buckets a spends, in the stores' order: the four
// per-minute buckets (none for an Unlimited figure), then each window's
// meters (Store), the plan's lent windows before the entry's own in each
// scope.
func stages(a *admission) []stage {
	var st []stage
	for _, s := range [4]stage{
		{KeyRequests, Window{}, 1, 2 * a.kl.RequestsPerMinute},
		{KeyTokens, Window{}, a.est, 2 * a.kl.TokensPerMinute},
		{WorkspaceRequests, Window{}, 1, 2 * a.wl.RequestsPerMinute},
		{WorkspaceTokens, Window{}, a.est, 2 * a.wl.TokensPerMinute},
	} {
		if s.cap != 2*Unlimited {
			st = append(st, s)
		}
	}
	meters := WindowMeters()
	pk, pw := a.lentLimits()
	for scope, ls := range [2][2]Limits{{pk, a.kl}, {pw, a.wl}} {
		for _, l := range ls {
			for _, w := range l.Windows {
				for m, b := range meters[scope] {
					if f := w.Figure(b); f > 0 {
						st = append(st, stage{b, w, [4]int64{1, a.est, a.input, 1}[m], f})
					}
				}
			}
		}
	}
	return st
}

// isWindow reports whether s is a window's bucket (not a per-minute one).
func (s stage) isWindow() bool { return s.w.Per != 0 || s.w.Calendar != NoCalendar }

// neverFitsMessage is the 429 message of a request that can never be
// admitted: it names the first bucket whose whole capacity is smaller
// than the request (a per-minute bucket's, then a window's), else the
// first whose capacity less its class's reserve is (WithPriority).
func neverFitsMessage(a *admission, docs string) string {
	st := stages(a)
	for _, s := range st {
		if s.need <= s.cap {
			continue
		}
		what := s.b.Meter() + " per minute (" + s.b.Scope() + ")"
		if s.isWindow() {
			what = meterPhrase(s.b, s.w) + " (" + s.b.Scope() + ")"
		}
		if a.entry != "" {
			what = a.entry + "'s " + what
		}
		if !s.isWindow() {
			return fmt.Sprintf("Request too large for %s: its estimated %d tokens exceed the bucket's whole capacity of %d %s. Retrying will not help: send a smaller request or move to a larger %s.%s",
				what, s.need, s.cap, planPhrase(a), planWord(a), seeDocs(docs))
		}
		return fmt.Sprintf("Request too large for %s: its estimated %d %s exceed the window's whole capacity of %d %s. Retrying will not help: send a smaller request or move to a larger %s.%s",
			what, s.need, s.b.Meter(), s.cap, planPhrase(a), planWord(a), seeDocs(docs))
	}
	if a.reserve > 0 && a.class != "" {
		for _, s := range st {
			floor := ReserveFloor(a.reserve, s.cap)
			if s.need <= s.cap-floor {
				continue
			}
			per := "minute"
			if s.isWindow() {
				per = windowPhrase(s.w)
			}
			what := s.b.Meter() + " per " + per + " (" + s.b.Scope() + ")"
			if a.entry != "" {
				what = a.entry + "'s " + what
			}
			return fmt.Sprintf("Request too large for %s: it needs %d %s, more than the %d of the bucket's whole capacity of %d %s that its class may use; %s is kept for other traffic (priority class %s). Retrying will not help: send a smaller request or move to a larger %s.%s",
				what, s.need, s.b.Meter(), s.cap-floor, s.cap, planPhrase(a), reservePercent(a.reserve), a.class, planWord(a), seeDocs(docs))
		}
	}
	// A store's NeverFits that no figure explains (a store of its own):
	// the workspace's tokens bucket, as before windows and reserves.
	return fmt.Sprintf("Request too large for tokens per minute (workspace): its estimated %d tokens exceed the bucket's whole capacity of %d %s. Retrying will not help: send a smaller request or move to a larger %s.%s",
		a.est, 2*a.wl.TokensPerMinute, planPhrase(a), planWord(a), seeDocs(docs))
}
