package llmrate

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/felixge/httpsnoop"
	"github.com/llmrate/llmrate/usage"
	"go.uber.org/zap"
)

// tracker wraps one admitted request's ResponseWriter (with httpsnoop, so
// Flush, Hijack, ReadFrom, Push and Unwrap keep working) and feeds every
// body byte to the usage scanner after it has gone to the client. Trackers
// are pooled; each use hands the handler a writer bound to that use (one
// small function per hooked method), which fails with ErrWriterReleased
// once the handler has returned.
type tracker struct {
	l       *Limiter
	a       admission
	w       http.ResponseWriter
	head    bool // HEAD request: no body
	wrapped http.ResponseWriter
	scan    usage.Scanner

	headerDone bool
	writeErr   bool
	hijacked   bool
	inject     bool // WithStreamUsage rewrote the request
	filtering  bool // ...and the response is the SSE stream to filter
	filter     usage.Filter
	trailers   trailerPlan // WithRateLimitTrailers: see trailers.go

	nextWriteHeader httpsnoop.WriteHeaderFunc
	nextWrite       httpsnoop.WriteFunc
	nextWriteString httpsnoop.WriteStringFunc
	nextReadFrom    httpsnoop.ReadFromFunc
	nextHijack      httpsnoop.HijackFunc
	nextFlush       httpsnoop.FlushFunc
	nextFlushError  httpsnoop.FlushErrorFunc

	hooks   httpsnoop.Hooks
	tee     teeReader
	forward func([]byte) (int, error) // the filter's output: the Write next in line at the time of the call

	gen    atomic.Uint64 // the current use; bumped by close when the handler returns
	active atomic.Int32  // calls in progress through a writer (enter/exit)
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

// newTracker returns a tracker for l with its httpsnoop hooks, built
// once: each hook (the hook methods) returns a function bound to the use
// (the generation) current when httpsnoop.Wrap called it, so a writer
// kept past its handler's return is detected and refused (see enter),
// even once this tracker serves another request.
func newTracker(l *Limiter) *tracker {
	t := &tracker{l: l}
	t.tee.t = t
	t.forward = func(b []byte) (int, error) { return t.nextWrite(b) }
	t.hooks = httpsnoop.Hooks{
		WriteHeader: t.hookWriteHeader,
		Write:       t.hookWrite,
		WriteString: t.hookWriteString,
		ReadFrom:    t.hookReadFrom,
		Flush:       t.hookFlush,
		FlushError:  t.hookFlushError,
		Hijack:      t.hookHijack,
	}
	return t
}

// hookWriteHeader is the WriteHeader hook: it records next and returns
// WriteHeader through t for the current use.
func (t *tracker) hookWriteHeader(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
	t.nextWriteHeader = next
	g := t.gen.Load()
	return func(code int) {
		if !t.enter(g) {
			return
		}
		defer t.exit()
		t.writeHeader(code)
	}
}

// hookWrite is the Write hook: it records next and returns
// Write through t for the current use.
func (t *tracker) hookWrite(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
	t.nextWrite = next
	g := t.gen.Load()
	return func(b []byte) (int, error) {
		if !t.enter(g) {
			return 0, ErrWriterReleased
		}
		defer t.exit()
		return t.write(b)
	}
}

// hookWriteString is the WriteString hook: it records next and returns
// WriteString through t for the current use.
func (t *tracker) hookWriteString(next httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
	t.nextWriteString = next
	g := t.gen.Load()
	return func(s string) (int, error) {
		if !t.enter(g) {
			return 0, ErrWriterReleased
		}
		defer t.exit()
		return t.writeString(s)
	}
}

// hookReadFrom is the ReadFrom hook: it records next and returns
// ReadFrom through t for the current use.
func (t *tracker) hookReadFrom(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
	t.nextReadFrom = next
	g := t.gen.Load()
	return func(src io.Reader) (int64, error) {
		if !t.enter(g) {
			return 0, ErrWriterReleased
		}
		defer t.exit()
		return t.readFrom(src)
	}
}

// hookFlush is the Flush hook: it records next and returns Flush through
// t for the current use. A Flush before the first write commits the
// header, as WriteHeader does: the rate-limit headers and the trailer
// declaration go with it. Both Flush and FlushError are hooked so that
// httpsnoop never builds a hook per call (its FlushError fallback would).
func (t *tracker) hookFlush(next httpsnoop.FlushFunc) httpsnoop.FlushFunc {
	t.nextFlush = next
	g := t.gen.Load()
	return func() {
		if !t.enter(g) {
			return
		}
		defer t.exit()
		t.flush()
	}
}

// hookFlushError is the FlushError hook: it records next and returns
// FlushError through t for the current use.
func (t *tracker) hookFlushError(next httpsnoop.FlushErrorFunc) httpsnoop.FlushErrorFunc {
	t.nextFlushError = next
	g := t.gen.Load()
	return func() error {
		if !t.enter(g) {
			return ErrWriterReleased
		}
		defer t.exit()
		return t.flushError()
	}
}

// hookHijack is the Hijack hook: it records next and returns
// Hijack through t for the current use.
func (t *tracker) hookHijack(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
	t.nextHijack = next
	g := t.gen.Load()
	return func() (net.Conn, *bufio.ReadWriter, error) {
		if !t.enter(g) {
			return nil, nil, ErrWriterReleased
		}
		defer t.exit()
		return t.hijack()
	}
}

// enter admits a call through a writer of generation g: false once that
// use is over (its handler returned). A call admitted holds t until exit.
//
// With close (run when the handler returns) this makes a stale writer safe
// without a lock: enter adds to active, then reads gen; close adds to gen,
// then reads active. Both are sequentially consistent atomics, so either
// the call sees the new generation and backs off, or close sees the call in
// progress and never reuses t.
func (t *tracker) enter(g uint64) bool {
	t.active.Add(1)
	if t.gen.Load() != g {
		t.active.Add(-1)
		return false
	}
	return true
}

func (t *tracker) exit() { t.active.Add(-1) }

// close ends the current use: every later call through its writer fails.
// It reports false when a call through that writer is still running (a
// handler's goroutine writing while the handler returned): t is then still
// in use by it and must be neither read nor reused.
func (t *tracker) close() bool {
	t.gen.Add(1)
	return t.active.Load() == 0
}

func (t *tracker) start(w http.ResponseWriter, r *http.Request, a *admission) {
	t.a = *a
	t.w = w
	t.head = r.Method == http.MethodHead
	t.headerDone, t.writeErr, t.hijacked, t.inject, t.filtering = false, false, false, false, false
	t.trailers = planTrailers(t.l.cfg.trailers, r)
	t.wrapped = httpsnoop.Wrap(w, t.hooks)
}

// release drops references so a pooled tracker holds no request state, and
// closes the scanner (joining the goroutine decoding a gzip, deflate, br or
// zstd body, should the response have ended without finish reaching the
// scanner).
func (t *tracker) release() {
	t.scan.Close()
	t.filter.Reset(nil, nil)
	t.w, t.wrapped = nil, nil
	t.nextWriteHeader, t.nextWrite, t.nextWriteString, t.nextReadFrom, t.nextHijack = nil, nil, nil, nil, nil
	t.nextFlush, t.nextFlushError = nil, nil
	t.a = admission{}
	t.tee.src = nil
}

// beginBody runs once, when the final status is known: it writes the
// rate-limit headers and readies the scanner for this response's body (the
// one place it is reset: a response that never gets here is not scanned).
func (t *tracker) beginBody(code int) {
	t.headerDone = true
	h := t.w.Header()
	// A provider's own 429 is relayed untouched: its Retry-After and its
	// rate-limit headers are the client's to read, whatever the style.
	if t.l.cfg.headers != HeadersNone && code != http.StatusTooManyRequests {
		t.l.setRateLimitHeaders(h, &t.a)
	}
	t.declareTrailers(code, h)
	var ct, ce string // no body: nothing to scan
	if !t.head && code != http.StatusNoContent && code != http.StatusNotModified {
		ct, ce = headerGet(h, "Content-Type"), headerGet(h, "Content-Encoding")
	}
	t.scan.Reset(ct, ce)
	t.filtering = t.inject && code == http.StatusOK && t.scan.Framing() == usage.FramingSSE
	if t.filtering && ce != "" && !strings.EqualFold(strings.TrimSpace(ce), "identity") {
		// Asked for identity (injectStreamUsage), the upstream encoded the
		// stream anyway: it is relayed as sent, usage chunk included.
		t.filtering = false
		t.l.usageShown.Add(1)
		if e := t.l.log.Check(zap.WarnLevel, "llmrate: stream encoded despite Accept-Encoding: identity; its usage chunk reaches the client"); e != nil {
			e.Write(zap.String("key_fp", Fingerprint(t.a.key)), zap.String("content_encoding", ce))
		}
	}
	if t.filtering {
		// The body may lose its usage-only chunk: a length declared
		// upstream would no longer hold.
		h.Del("Content-Length")
		t.filter.Reset(&t.scan, t.forward)
	}
}

// scanned returns what the response's body held; a response whose body
// never began held nothing.
func (t *tracker) scanned() usage.Result {
	if !t.headerDone {
		return usage.Result{}
	}
	return t.scan.Finish()
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
		n, err := t.filter.Write(b)
		if err != nil {
			t.writeErr = true
		}
		return n, err
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

// flush commits the header as a first write would (a Flush before any
// write sends a 200), then flushes.
func (t *tracker) flush() {
	if !t.headerDone && !t.hijacked {
		t.beginBody(http.StatusOK)
	}
	t.nextFlush()
}

func (t *tracker) flushError() error {
	if !t.headerDone && !t.hijacked {
		t.beginBody(http.StatusOK)
	}
	return t.nextFlushError()
}

// endBody runs after the handler returned: it forwards what a filtered
// stream still holds.
func (t *tracker) endBody() {
	if t.filtering && !t.hijacked {
		_ = t.filter.Flush()
	}
	t.filter.Reset(nil, nil)
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
