package llmrate

import (
	"errors"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/llmrate/llmrate/internal/apierr"
)

// statusOverloaded is the status Anthropic answers when it is overloaded,
// and the one a request shed by WithMaxInFlight gets when it carries an
// anthropic-version header.
const statusOverloaded = 529

// overloadedMsg is the message of a shed request's answer.
const overloadedMsg = "The gateway is at its cap of requests in flight. This is not a rate limit and nothing was charged; please try again in 1s."

// WithMaxInFlight caps the requests of this Limiter inside the next
// handler at once, in this process, at n: a guard for the process itself
// (its memory, its goroutines, its connections upstream), not a rate limit.
// Past the cap a request is shed before anything else is done with it (no
// extractor, no estimate, no store call: nothing is debited anywhere and
// nothing is reconciled) with a 503, Retry-After: 1 and
//
//	{"error":{"message":"…","type":"overloaded_error","param":null,"code":"overloaded"}}
//
// or, when it carries an anthropic-version header, Anthropic's own answer
// when it is overloaded: a 529, Retry-After: 1 and
//
//	{"type":"error","error":{"type":"overloaded_error","message":"…"}}
//
// The official OpenAI and Anthropic SDKs retry both on their own.
//
// A request takes its slot when it reaches the limiter and holds it until
// the next handler returns, whether it returns normally, panics or
// hijacked the connection; a request answered by the limiter itself (a
// 401, a 429) gives it back when its answer is written. A request waiting
// for its reservation (WithMaxWait) holds its slot while it waits, so
// keep n above what WithMaxWaiters lets wait if the waiters must not
// crowd out the requests that fit now.
//
// Shed counts the requests shed. In shadow mode (WithShadow) a request
// past the cap is counted by Shed and passes to the next handler as if the
// limiter were not there: neither decided nor debited, and holding no
// slot, so the count in flight, and what Shed reports, stay what
// enforcement would make them.
//
// 0, the default, sets no cap; n must not be negative.
func WithMaxInFlight(n int) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.fail("WithMaxInFlight", errors.New("must not be negative"))
		}
		c.maxInFlight = n
	})
}

// Shed returns how many requests WithMaxInFlight shed (in shadow mode:
// would have shed, and let through).
func (l *Limiter) Shed() int64 { return l.shed.Load() }

// takeSlot takes a slot under the WithMaxInFlight cap n (> 0); false when
// all n are taken. Exact: a request never finds the cap full because of
// another request that was itself shed.
func (l *Limiter) takeSlot(n int64) bool {
	for {
		c := l.inFlight.Load()
		if c >= n {
			return false
		}
		if l.inFlight.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// shedRequest counts a request past the WithMaxInFlight cap and answers
// it; in shadow mode it answers nothing and reports pass: the request goes
// on to the next handler.
func (l *Limiter) shedRequest(w http.ResponseWriter, r *http.Request) (pass bool) {
	l.shed.Add(1)
	if ce := l.debug.Check(zap.DebugLevel, "llmrate: shed (in-flight cap)"); ce != nil {
		ce.Write(zap.Int("max_in_flight", l.cfg.maxInFlight), zap.Bool("shadow", l.cfg.shadow))
	}
	if l.cfg.shadow {
		return true
	}
	status, body := http.StatusServiceUnavailable, apierr.Body("overloaded_error", "overloaded", overloadedMsg)
	if headerGet(r.Header, "Anthropic-Version") != "" {
		status, body = statusOverloaded, apierr.AnthropicBody("overloaded_error", overloadedMsg)
	}
	h := w.Header()
	h.Set(HeaderRetryAfter, "1")
	h.Set("Content-Type", "application/json")
	h.Set(HeaderRequestID, requestID(r))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return false
}
