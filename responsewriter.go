package llmrate

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"unsafe"

	"github.com/felixge/httpsnoop"
)

// tracker wraps one admitted request's ResponseWriter (with httpsnoop, so
// Flush, Hijack, ReadFrom, Push and Unwrap keep working) and feeds every
// body byte to the usage scanner after it has gone to the client. Trackers
// are pooled: their hook functions are built once, so wrapping costs only
// what httpsnoop.Wrap itself allocates.
type tracker struct {
	l       *Limiter
	a       admission
	w       http.ResponseWriter
	head    bool // HEAD request: no body
	wrapped http.ResponseWriter
	scan    UsageScanner

	headerDone bool
	writeErr   bool
	hijacked   bool
	inject     bool // WithStreamUsage rewrote the request
	filtering  bool // ...and the response is the SSE stream to filter
	filter     usageFilter
	trailers   trailerPlan // WithRateLimitTrailers: see trailers.go

	nextWriteHeader httpsnoop.WriteHeaderFunc
	nextWrite       httpsnoop.WriteFunc
	nextWriteString httpsnoop.WriteStringFunc
	nextReadFrom    httpsnoop.ReadFromFunc
	nextHijack      httpsnoop.HijackFunc

	hooks httpsnoop.Hooks
	tee   teeReader
}

type teeReader struct {
	t   *tracker
	src io.Reader
}

func (r *teeReader) Read(p []byte) (int, error) {
	n, err := r.src.Read(p)
	if n > 0 {
		_, _ = r.t.scan.Write(p[:n])
	}
	return n, err
}

func newTracker(l *Limiter) *tracker {
	t := &tracker{l: l}
	t.tee.t = t
	writeHeader, write, writeString, readFrom, hijack := t.writeHeader, t.write, t.writeString, t.readFrom, t.hijack
	t.hooks = httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			t.nextWriteHeader = next
			return writeHeader
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			t.nextWrite = next
			return write
		},
		WriteString: func(next httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
			t.nextWriteString = next
			return writeString
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			t.nextReadFrom = next
			return readFrom
		},
		Hijack: func(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
			t.nextHijack = next
			return hijack
		},
	}
	return t
}

func (t *tracker) start(w http.ResponseWriter, r *http.Request, a *admission) {
	t.a = *a
	t.w = w
	t.head = r.Method == http.MethodHead
	t.headerDone, t.writeErr, t.hijacked, t.inject, t.filtering = false, false, false, false, false
	t.trailers = planTrailers(t.l.cfg.trailers, r)
	t.wrapped = httpsnoop.Wrap(w, t.hooks)
}

// release drops references so a pooled tracker holds no request state.
func (t *tracker) release() {
	t.w, t.wrapped = nil, nil
	t.nextWriteHeader, t.nextWrite, t.nextWriteString, t.nextReadFrom, t.nextHijack = nil, nil, nil, nil, nil
	t.a = admission{}
	t.tee.src = nil
}

// beginBody runs once, when the final status is known: it writes the
// rate-limit headers and readies the scanner for this response's body (the
// one place it is reset: a response that never gets here is not scanned).
func (t *tracker) beginBody(code int) {
	t.headerDone = true
	h := t.w.Header()
	if t.l.cfg.headers != HeadersNone {
		t.l.setRateLimitHeaders(h, &t.a)
	}
	t.declareTrailers(code, h)
	var ct, ce string // no body: nothing to scan
	if !t.head && code != http.StatusNoContent && code != http.StatusNotModified {
		ct, ce = headerGet(h, "Content-Type"), headerGet(h, "Content-Encoding")
	}
	t.scan.reset(ct, ce)
	t.filtering = t.inject && code == http.StatusOK && ce == "" && t.scan.frame == frameSSE
}

// scanned returns the usage the response reported, whether it stopped in
// the middle of an SSE event, and the body bytes seen; a response whose
// body never began reported nothing.
func (t *tracker) scanned() (u Usage, found, pending bool, n int64) {
	if !t.headerDone {
		return Usage{}, false, false, 0
	}
	u, found = t.scan.Finish()
	return u, found, t.scan.PendingEvent(), t.scan.Bytes()
}

func (t *tracker) writeHeader(code int) {
	if !t.headerDone && code >= 200 {
		t.beginBody(code)
	}
	t.nextWriteHeader(code)
}

func (t *tracker) write(b []byte) (int, error) {
	if !t.headerDone {
		t.beginBody(http.StatusOK)
	}
	if t.filtering {
		_, _ = t.scan.Write(b)
		if err := t.filter.write(b, t.nextWrite); err != nil {
			t.writeErr = true
			return 0, err
		}
		return len(b), nil
	}
	n, err := t.nextWrite(b)
	if n > 0 {
		_, _ = t.scan.Write(b[:n])
	}
	if err != nil {
		t.writeErr = true
	}
	return n, err
}

func (t *tracker) writeString(s string) (int, error) {
	if !t.headerDone {
		t.beginBody(http.StatusOK)
	}
	if t.filtering {
		return t.write(unsafe.Slice(unsafe.StringData(s), len(s)))
	}
	n, err := t.nextWriteString(s)
	if n > 0 {
		_, _ = t.scan.Write(unsafe.Slice(unsafe.StringData(s), n))
	}
	if err != nil {
		t.writeErr = true
	}
	return n, err
}

func (t *tracker) readFrom(src io.Reader) (int64, error) {
	if !t.headerDone {
		t.beginBody(http.StatusOK)
	}
	if t.filtering {
		return io.Copy(writerFunc(t.write), src)
	}
	t.tee.src = src
	n, err := t.nextReadFrom(&t.tee)
	t.tee.src = nil
	if err != nil {
		t.writeErr = true
	}
	return n, err
}

// endBody runs after the handler returned: it forwards what a filtered
// stream still holds.
func (t *tracker) endBody() {
	if t.filtering && !t.hijacked {
		t.filter.flush(t.nextWrite)
	}
	t.filter.held = t.filter.held[:0]
	t.filter.passing = false
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (t *tracker) hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := t.nextHijack()
	if err == nil {
		t.hijacked = true
	}
	return c, rw, err
}
