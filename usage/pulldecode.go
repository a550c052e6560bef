package usage

import (
	"fmt"
	"io"
	"strings"
)

// Decode returns a reader of src decoded as contentEncoding (a
// Content-Encoding header value: identity, gzip, x-gzip, deflate, br or
// zstd) says, with the decoders and limits a Scanner uses, read by the
// caller (no goroutine), and a function to call once done reading, which
// releases the decoder (a zstd decoder goes back to the pool only when its
// stream was read to its end). The reader returns io.EOF where the encoded
// stream ends and a *DecodeError where it is corrupt or truncated. An
// unsupported coding or a chain of codings is an error and no reader. The
// middleware reads a request body sent with a Content-Encoding through it.
func Decode(contentEncoding string, src io.Reader) (r io.Reader, done func(), err error) {
	c, err := parseCoding(contentEncoding)
	if err != nil {
		return nil, nil, err
	}
	if c == codingIdentity {
		return src, func() {}, nil
	}
	f := &decodeFeed{coding: c, header: strings.TrimSpace(contentEncoding)}
	defer func() {
		if v := recover(); v != nil { // a decoder library's bug on hostile input
			r, done, err = nil, nil, &DecodeError{Coding: f.header, Reason: DecodeCorrupt, Err: fmt.Errorf("decoder panic: %v", v)}
		}
	}()
	dr, cleanup, err := f.open(src)
	if err != nil {
		return nil, nil, f.classify(err)
	}
	p := &pullReader{f: f, r: dr}
	return p, func() {
		if cleanup != nil {
			cleanup(p.ended)
		}
	}, nil
}

// pullReader reads a decoder, reporting the end of its stream as io.EOF
// (brotli's "excessive input" included, as the response side takes it),
// any other failure as a *DecodeError, and a decoder's panic as one.
type pullReader struct {
	f     *decodeFeed
	r     io.Reader
	ended bool
}

func (p *pullReader) Read(b []byte) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			n, err = 0, &DecodeError{Coding: p.f.header, Reason: DecodeCorrupt, Err: fmt.Errorf("decoder panic: %v", v)}
		}
	}()
	n, err = p.r.Read(b)
	switch {
	case err == nil:
	case err == io.EOF || isBrotliEnd(err):
		p.ended = true
		err = io.EOF
	default:
		err = p.f.classify(err)
	}
	return n, err
}
