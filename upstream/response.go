package upstream

import (
	"io"
	"net/http"
	"sync"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/usage"
)

// respBody is a provider's response body as the caller reads it: every
// byte passes through unchanged and unbuffered, and is scanned for the
// usage the provider reported. The attempt's reservation is reconciled
// exactly once: at the end of the body, or when it is closed.
type respBody struct {
	rc     io.ReadCloser
	res    *reservation
	length int64 // the response's ContentLength; -1 unknown

	mu      sync.Mutex // guards what follows: Read and Close may race
	scan    *usage.Scanner
	term    terminal
	sse     bool // the terminal detector runs (an unencoded event stream)
	n       int64
	readErr bool
	done    bool
}

var scanners = sync.Pool{New: func() any { return new(usage.Scanner) }}

// wrapBody makes resp's body reconcile res.
func wrapBody(resp *http.Response, res *reservation) {
	s := scanners.Get().(*usage.Scanner)
	ce := resp.Header.Get("Content-Encoding")
	s.Reset(resp.Header.Get("Content-Type"), ce)
	b := &respBody{rc: resp.Body, res: res, length: resp.ContentLength, scan: s}
	b.sse = s.Framing() == usage.FramingSSE && ce == ""
	resp.Body = b
}

// Read reads the provider's body; at its end, the reservation is
// reconciled from the usage it reported.
func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return n, err
	}
	if n > 0 {
		b.n += int64(n)
		_, _ = b.scan.Write(p[:n])
		if b.sse {
			b.term.write(p[:n])
		}
	}
	if err == nil {
		b.mu.Unlock()
		return n, nil
	}
	if err != io.EOF {
		b.readErr = true
		b.mu.Unlock()
		return n, err
	}
	r := b.finish()
	b.mu.Unlock()
	b.res.settle(r, false)
	return n, err
}

// Close closes the provider's body and, unless the body was read to its
// end, reconciles the reservation: a body closed before its end is a cut
// response, unless all of its declared length, or the stream's terminal
// event, was read.
func (b *respBody) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return err
	}
	whole := b.length >= 0 && b.n >= b.length && !b.readErr
	cut := !whole && !b.term.seen
	r := b.finish()
	b.mu.Unlock()
	b.res.settle(r, cut)
	return err
}

// finish ends the scan (b.mu held).
func (b *respBody) finish() usage.Result {
	b.done = true
	r := b.scan.Finish()
	scanners.Put(b.scan)
	b.scan = nil
	return r
}

// reconcileKind names the case of the charge rule that applied.
func reconcileKind(r usage.Result, cut bool) llmrate.ReconcileKind {
	switch {
	case r.Complete(cut):
		return llmrate.ReconcileUsage
	case r.Reported:
		return llmrate.ReconcilePartial
	}
	return llmrate.ReconcileEstimated
}

// terminal finds a stream's terminal event in an event stream: OpenAI's
// "data: [DONE]", Anthropic's message_stop, the Responses API's
// response.completed. The official SDKs stop reading there and close the
// body, which is then not a cut response. It looks only at the first bytes
// of each line; generated text cannot start a line (JSON strings escape
// line breaks).
type terminal struct {
	line  [40]byte // the current line's first bytes
	n     int      // bytes of the current line (may exceed len(line))
	cr    bool     // the previous byte was '\r'
	armed bool     // the current event holds a terminal line
	seen  bool     // a terminal event was read whole
}

// terminalLines are the lines that make an event terminal, matched in full
// (an "event:" line) or as a prefix (a "data:" line of compact JSON).
var terminalLines = [...]struct {
	text   string
	prefix bool
}{
	{"data: [DONE]", false},
	{"data:[DONE]", false},
	{"event: message_stop", false},
	{"event:message_stop", false},
	{"event: response.completed", false},
	{"event:response.completed", false},
	{`data: {"type":"message_stop"`, true},
	{`data: {"type":"response.completed"`, true},
}

func (t *terminal) write(p []byte) {
	for _, c := range p {
		if t.seen {
			return
		}
		switch {
		case c == '\n' && t.cr:
			t.cr = false // the second byte of CRLF
		case c == '\n' || c == '\r':
			t.cr = c == '\r'
			t.endLine()
		default:
			t.cr = false
			if t.n < len(t.line) {
				t.line[t.n] = c
			}
			t.n++
		}
	}
}

func (t *terminal) endLine() {
	if t.n == 0 { // an empty line ends the event
		t.seen = t.armed
		t.armed = false
		return
	}
	line := t.line[:min(t.n, len(t.line))]
	for _, l := range terminalLines {
		if l.prefix && len(line) >= len(l.text) && string(line[:len(l.text)]) == l.text ||
			!l.prefix && t.n == len(l.text) && string(line) == l.text {
			t.armed = true
		}
	}
	t.n = 0
}
