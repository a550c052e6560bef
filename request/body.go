package request

import (
	"bytes"
	"io"
	"net/http"
	"sync"

	"github.com/llmrate/llmrate/internal/readahead"
)

// readAheadBody returns r's body read ahead: the one an earlier reader of
// this request (Model, Estimate, Input) left, when nothing has been
// replayed from it yet, else a new one that replaces r.Body. nil: r has no
// body.
func readAheadBody(r *http.Request) *replayBody {
	if rb, ok := r.Body.(*replayBody); ok && !rb.hasStarted() {
		return rb
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	if coding := requestCoding(r); coding != "" {
		return readAheadEncoded(r, coding)
	}
	declaredLarge := r.ContentLength > MaxBody
	size := MaxBody
	if r.ContentLength > 0 && r.ContentLength < MaxBody {
		size = int(r.ContentLength) + 1 // room to see the end without growing
	}
	// At most MaxBody bytes are held; one more byte, read on its own,
	// tells a body at the bound from a larger one.
	buf, err := readahead.Read(r.Body, make([]byte, 0, min(size, 64<<10)), MaxBody)
	rb := &replayBody{head: buf, ahead: buf, end: err, declaredLarge: declaredLarge, Closer: r.Body}
	if err == nil && !declaredLarge {
		var one [1]byte
		switch n, perr := io.ReadFull(r.Body, one[:]); {
		case n == 1:
			rb.rest = io.MultiReader(bytes.NewReader(one[:]), r.Body)
		case perr == io.EOF:
			rb.end = io.EOF
		default:
			rb.end, rb.rest = perr, errReader{perr}
		}
		r.Body = rb
		return rb
	}
	switch err {
	case nil:
		rb.rest = r.Body
	case io.EOF:
	default:
		rb.rest = errReader{err}
	}
	r.Body = rb
	return rb
}

// replayBody is a request body whose first bytes were read ahead: it
// replays them in front of what is left of the body; Close still closes the
// original body. It keeps what the body readers of the request found in
// them, so that the body is read ahead, and scanned, once. Once the bytes
// read ahead have all been replayed, or the body is closed, it lets them
// go: a long response after a large request holds none of it.
type replayBody struct {
	mu   sync.Mutex // Close may come from another goroutine than Read (a Transport's)
	head []byte     // read ahead, not yet replayed
	rest io.Reader  // nil: the body had ended
	io.Closer

	ahead         []byte // every byte read ahead (head before any replay); nil once released
	end           error  // how the read-ahead stopped: nil (MaxBody bytes read and more follow), io.EOF or the read error
	declaredLarge bool   // a declared Content-Length above MaxBody
	started       bool   // the replay began (or the body was closed): the facts are no longer read
	scanned       int8   // 0: not scanned; 1: for the model; 2: for the estimate too
	f             bodyFacts
}

// whole reports whether ahead is the whole body, within MaxBody.
func (b *replayBody) whole() bool { return b.end == io.EOF && len(b.ahead) <= MaxBody }

// prefix reports whether ahead is the first MaxBody bytes of a larger
// declared body (read without error).
func (b *replayBody) prefix() bool { return b.declaredLarge && b.end == nil }

// facts scans the bytes read ahead, once: for the model, and for the
// estimate too when estimate is set (a scan for both serves either).
func (b *replayBody) facts(estimate bool) *bodyFacts {
	want := int8(1)
	if estimate {
		want = 2
	}
	if b.scanned < want {
		b.f = scanBody(b.ahead, estimate)
		b.scanned = want
	}
	return &b.f
}

// release lets the bytes read ahead go (the facts' model points into them).
// b.mu is held.
func (b *replayBody) release() {
	b.started = true
	b.head, b.ahead, b.f.model = nil, nil, nil
}

func (b *replayBody) hasStarted() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if len(b.head) > 0 {
		b.started = true
		n := copy(p, b.head)
		b.head = b.head[n:]
		if len(b.head) > 0 {
			b.mu.Unlock()
			return n, nil
		}
		b.release()
		b.mu.Unlock()
		if b.rest == nil {
			return n, io.EOF
		}
		return n, nil
	}
	if b.ahead != nil && len(p) > 0 { // nothing was read ahead: the replay begins here
		b.release()
	}
	b.mu.Unlock()
	if b.rest == nil {
		return 0, io.EOF
	}
	return b.rest.Read(p)
}

// Close closes the original body and lets the bytes read ahead go.
func (b *replayBody) Close() error {
	b.mu.Lock()
	b.release()
	b.mu.Unlock()
	return b.Closer.Close()
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
