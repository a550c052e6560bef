package upstream

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/llmrate/llmrate/internal/readahead"
)

// reqBody is a request's body as its attempts send it: buffered whole when
// it is at most MaxReplayBody bytes, else its first bytes read ahead and the
// rest streamed once, replayed from GetBody if the caller gave one.
type reqBody struct {
	orig     io.ReadCloser // the caller's body; nil when none
	handed   bool          // orig was handed to the base RoundTripper, which closes it
	buffered bool          // buf is the whole body
	buf      []byte        // the whole body, or the bytes read ahead
	getBody  func() (io.ReadCloser, error)
	length   int64 // the ContentLength each attempt declares
	sends    int
}

// prepare reads the caller's body ahead: up to MaxReplayBody+1 bytes. A
// read error is returned: the request cannot be sent.
func (b *reqBody) prepare(req *http.Request) error {
	b.length = req.ContentLength
	if req.Body == nil || req.Body == http.NoBody {
		b.buffered, b.length = true, max(0, b.length)
		return nil
	}
	b.orig, b.getBody = req.Body, req.GetBody
	want := MaxReplayBody + 1 // one more byte tells a body at the bound from a larger one
	size := want
	if req.ContentLength >= 0 && req.ContentLength < int64(want) {
		size = int(req.ContentLength) + 1
	}
	buf, err := readahead.Read(req.Body, make([]byte, 0, min(size, 64<<10)), want)
	b.buf = buf
	switch {
	case err == io.EOF && len(buf) <= MaxReplayBody:
		b.buffered = true
		b.closeOriginal()
		if b.length <= 0 || len(buf) == 0 { // 0 with a body means unknown, as in net/http
			b.length = int64(len(buf))
		}
		return nil
	case err != nil && err != io.EOF:
		b.closeOriginal()
		return fmt.Errorf("upstream: reading the request body: %w", err)
	}
	return nil
}

// replayable reports whether the body can be sent again.
func (b *reqBody) replayable() bool { return b.buffered || b.getBody != nil }

// probe returns a reader of the body's first bytes (the whole body when it
// is buffered), for the estimator and the model.
func (b *reqBody) probe() io.ReadCloser {
	if len(b.buf) == 0 && b.buffered {
		return http.NoBody
	}
	return io.NopCloser(bytes.NewReader(b.buf))
}

// attach sets out's body for one more attempt. It fails only when GetBody
// does.
func (b *reqBody) attach(out *http.Request) error {
	b.sends++
	out.ContentLength = b.length
	switch {
	case b.buffered && len(b.buf) == 0:
		out.Body, out.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	case b.buffered:
		buf := b.buf
		out.Body = io.NopCloser(bytes.NewReader(buf))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	case b.sends == 1:
		out.Body = &aheadBody{Reader: io.MultiReader(bytes.NewReader(b.buf), b.orig), Closer: b.orig}
		out.GetBody = b.getBody
	default:
		rc, err := b.getBody()
		if err != nil {
			return fmt.Errorf("upstream: GetBody: %w", err)
		}
		out.Body, out.GetBody = rc, b.getBody
	}
	return nil
}

// sent records that out's body went to the base RoundTripper, which closes
// it (the caller's, on the first unbuffered send).
func (b *reqBody) sent() {
	if !b.buffered && b.sends == 1 {
		b.handed = true
	}
}

// unsent closes out's body when the attempt it was attached for is not
// sent and the body is its own: one GetBody made for it. The caller's body
// (the first unbuffered send) stays for closeOriginal; a buffered one holds
// nothing to close.
func (b *reqBody) unsent(out *http.Request) {
	if !b.buffered && b.sends > 1 && out.Body != nil {
		_ = out.Body.Close()
	}
}

// closeOriginal closes the caller's body unless the base RoundTripper has
// it: the RoundTripper contract closes it on every path.
func (b *reqBody) closeOriginal() {
	if b.orig != nil && !b.handed {
		b.handed = true
		_ = b.orig.Close()
	}
}

// aheadBody is the caller's body with its first bytes read ahead; Close
// closes the caller's body.
type aheadBody struct {
	io.Reader
	io.Closer
}
