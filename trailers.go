package llmrate

import (
	"github.com/llmrate/llmrate/internal/memstore"
	"net/http"
	"strconv"
)

// Trailer names WithRateLimitTrailers sends, in canonical form: each
// bucket's whole remaining level after this request's real charge.
const (
	TrailerRemainingKeyRequests       = "X-Ratelimit-Remaining-Requests-Key"
	TrailerRemainingKeyTokens         = "X-Ratelimit-Remaining-Tokens-Key"
	TrailerRemainingWorkspaceRequests = "X-Ratelimit-Remaining-Requests-Workspace"
	TrailerRemainingWorkspaceTokens   = "X-Ratelimit-Remaining-Tokens-Workspace"
)

// trailerDeclaration is the Trailer header value announcing them.
const trailerDeclaration = TrailerRemainingKeyRequests + ", " + TrailerRemainingKeyTokens + ", " +
	TrailerRemainingWorkspaceRequests + ", " + TrailerRemainingWorkspaceTokens

// WithRateLimitTrailers sends, as HTTP trailers after the body, the key's
// and the workspace's remaining requests and tokens once this request's
// real charge (the provider's reported usage, or the estimate rule when
// none was reported) has replaced its estimate, so that a client of a long
// stream sees the state after reconciliation rather than the admission's
// guess. Off by default.
//
// The four trailers are TrailerRemainingKeyRequests,
// TrailerRemainingKeyTokens, TrailerRemainingWorkspaceRequests and
// TrailerRemainingWorkspaceTokens. Each is a bucket's whole level (never
// below 0), and they are declared in a Trailer header when the response's
// status is written. They are the same whatever the HeaderStyle,
// HeadersNone included: turning trailers on is the opt-in to sending these
// figures, they name key and workspace separately where the headers report
// only the binding bucket, and their names never collide with the
// upstream's own x-ratelimit-* headers, which HeadersNone leaves in place.
//
// The figures are computed in the request, not read back from the store:
// the admission's remaining levels, with the tokens buckets moved by
// (charge − estimate), the charge bounded at twice each bucket's capacity
// and the level kept within the bounds a store keeps it in, exactly as the
// store applies the reconcile. They do not include refill since admission
// or other requests' spending meanwhile, and they are sent even if the
// store call that applies the reconcile later fails.
//
// No trailers are declared or sent on a response that cannot carry them:
//   - an HTTP/1.1 response whose handler set a Content-Length (trailers
//     need chunked encoding; llmrate never changes the handler's framing),
//     and any HTTP/1.0 response;
//   - a HEAD request, or a 204 or 304 response (no body);
//   - a 429 relayed from the provider, which passes untouched;
//   - a response the limiter refused itself or did not track (a fail-open).
//
// HTTP/2 responses carry them with or without a Content-Length. An
// HTTP/1.1 response whose handler set no length is sent chunked even when
// its body is small enough that net/http would otherwise have computed a
// Content-Length itself.
func WithRateLimitTrailers() Option {
	return optionFunc(func(c *config) { c.trailers = true })
}

// trailerPlan is what a tracked request may do with trailers.
type trailerPlan uint8

const (
	trailersOff      trailerPlan = iota // off, or the request cannot carry them
	trailersH1                          // HTTP/1.1: only if the response is chunked
	trailersH2                          // HTTP/2 or later
	trailersDeclared                    // declared: send them in finish
)

// planTrailers decides, from the request alone, whether its response may
// carry trailers.
func planTrailers(on bool, r *http.Request) trailerPlan {
	switch {
	case !on || r.Method == http.MethodHead:
		return trailersOff
	case r.ProtoMajor >= 2:
		return trailersH2
	case r.ProtoAtLeast(1, 1):
		return trailersH1
	}
	return trailersOff
}

// declareTrailers runs when the final status is written, before the
// headers go out: it announces the trailers if this response can carry
// them.
func (t *tracker) declareTrailers(code int, h http.Header) {
	p := t.trailers
	t.trailers = trailersOff
	switch {
	case p == trailersOff,
		code == http.StatusTooManyRequests, // the provider's own: untouched
		code == http.StatusNoContent, code == http.StatusNotModified,
		p == trailersH1 && headerGet(h, "Content-Length") != "":
		return
	}
	h["Trailer"] = append(h["Trailer"], trailerDeclaration)
	t.trailers = trailersDeclared
}

// sendTrailers sets the declared trailers' values, after the body and
// before the handler chain returns to net/http, which writes them.
func (t *tracker) sendTrailers(charge int64) {
	if t.trailers != trailersDeclared || t.hijacked {
		return
	}
	t.trailers = trailersOff
	a := &t.a
	rem := a.d.Remaining
	h := t.w.Header()
	h[TrailerRemainingKeyRequests] = []string{strconv.FormatInt(max(rem[KeyRequests], 0), 10)}
	h[TrailerRemainingKeyTokens] = []string{strconv.FormatInt(afterCharge(rem[KeyTokens], a.est, charge, 2*KeyTokens.PerMinute(a.kl, a.wl)), 10)}
	h[TrailerRemainingWorkspaceRequests] = []string{strconv.FormatInt(max(rem[WorkspaceRequests], 0), 10)}
	h[TrailerRemainingWorkspaceTokens] = []string{strconv.FormatInt(afterCharge(rem[WorkspaceTokens], a.est, charge, 2*WorkspaceTokens.PerMinute(a.kl, a.wl)), 10)}
}

// afterCharge is a tokens bucket's whole level, never below 0, once a
// reconcile replaced est by charge on a bucket of the given capacity that
// was at level after admission: the same bound on the charge and the same
// adjustment a store applies (boundActual, then memstore.Bucket.Adjust).
func afterCharge(level, est, charge, capacity int64) int64 {
	b := memstore.Bucket{Level: level}
	b.Adjust(boundActual(charge, capacity)-est, capacity)
	return max(b.Level, 0)
}
