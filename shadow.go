package llmrate

import (
	"io"
	"net/http"

	"github.com/felixge/httpsnoop"
	"go.uber.org/zap"
)

// WithShadow runs the limiter in shadow mode, to roll limits out safely:
// every decision is made, counted, observed (DecisionEvent.Shadow is true on
// every decision), logged and reflected in the rate-limit headers, but a
// request that would have been refused passes through to the next handler
// instead of getting the 429. Such a request is neither debited nor
// reconciled (a refusal debits nothing), so the buckets evolve exactly as
// they would under enforcement: what shadow mode reports is what
// enforcement would do. ShadowRefusals counts the refusals let through.
//
// Shadow mode lets through what the limits would refuse, not bad client
// input: a request without an API key still gets its 401 (the limiter
// cannot tell whose allowance it would spend).
func WithShadow() Option {
	return optionFunc(func(c *config) { c.shadow = true })
}

// ShadowRefusals returns how many requests shadow mode let through that
// enforcement would have refused (0 without WithShadow).
func (l *Limiter) ShadowRefusals() int64 { return l.shadowRefusals.Load() }

// passShadow forwards a request that enforcement would refuse: it is
// logged as the refusal would be, carries the rate-limit headers of the
// refusal's decision (no Retry-After: the response is not a 429), and is
// not reconciled, since admission debited nothing.
func (l *Limiter) passShadow(w http.ResponseWriter, r *http.Request, a *admission, next http.Handler) {
	l.shadowRefusals.Add(1)
	secs := retryAfterSeconds(a.d)
	if ce := l.debug.Check(zap.DebugLevel, "llmrate: would refuse (shadow)"); ce != nil {
		ce.Write(fieldsRefused(a, secs)...)
	}
	if l.cfg.headers == HeadersNone {
		next.ServeHTTP(w, r)
		return
	}
	next.ServeHTTP(l.shadowWriter(w, a), r)
}

// shadowWriter wraps w so that the rate-limit headers of a's decision
// replace the upstream's once the handler writes its header (or flushes
// first).
func (l *Limiter) shadowWriter(w http.ResponseWriter, decided *admission) http.ResponseWriter {
	a := *decided // a copy for the hooks: the caller's admission stays on its stack
	done := false
	set := func() {
		if !done {
			done = true
			l.setRateLimitHeaders(w.Header(), &a)
		}
	}
	return httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(code int) {
				switch {
				case code == http.StatusTooManyRequests:
					done = true // the provider's own 429 is relayed untouched
				case code >= 200:
					set()
				}
				next(code)
			}
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(b []byte) (int, error) { set(); return next(b) }
		},
		WriteString: func(next httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
			return func(s string) (int, error) { set(); return next(s) }
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(src io.Reader) (int64, error) { set(); return next(src) }
		},
		// A Flush before the first write commits the header (a 200).
		Flush: func(next httpsnoop.FlushFunc) httpsnoop.FlushFunc {
			return func() { set(); next() }
		},
		FlushError: func(next httpsnoop.FlushErrorFunc) httpsnoop.FlushErrorFunc {
			return func() error { set(); return next() }
		},
	})
}
