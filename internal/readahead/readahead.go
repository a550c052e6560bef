// Package readahead reads the first bytes of a request body that both the
// middleware (ModelFromBody, EstimateFromBody) and upstream.Transport look
// into before the body is sent on.
package readahead

import "io"

// Read reads from body into buf until want bytes, the end (err is io.EOF)
// or a read error (err is that error). A nil err means want bytes were read
// and the body may go on. buf grows as needed from its capacity, doubling,
// never past want: the buffer returned holds at most want bytes (or buf's
// own capacity, when that was larger).
func Read(body io.Reader, buf []byte, want int) ([]byte, error) {
	for len(buf) < want {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(max(2*cap(buf), 512), want))
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):min(cap(buf), want)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
