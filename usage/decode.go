package usage

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// This file decodes a response body's Content-Encoding on the side: the
// bytes the client receives are only read, never changed or delayed, and
// the decoded bytes are pushed to a sink (the usage scanner).
//
// Memory bound per body, all of it allocated by the decoder libraries or
// here, and released when the feed is closed (the tests measure it, a
// decompression bomb included):
//
//	gzip, x-gzip, deflate  under 192 KiB: the 32 KiB window, Huffman tables,
//	                       a 4 KiB input buffer, the 32 KiB output buffer and,
//	                       while a gzip member's header is read, its extra
//	                       field (at most 64 KiB)
//	br                     the stream's window, at most 16 MiB (RFC 7932;
//	                       large windows are not enabled), grown as the
//	                       output needs it, + under 512 KiB
//	zstd                   the frame's window, at most maxZstdWindow (8 MiB,
//	                       RFC 9659), allocated when the frame starts,
//	                       + under 1 MiB (blocks, tables); decoders are
//	                       pooled with their windows (zstdDecoders), so a
//	                       body whose decoder is reused allocates neither
//
// No compressed byte is held beyond the decoder's own input buffer: a write
// returns once the decoder has taken all of it.
//
// CPU is bounded by maxDecodedBytes: a body that decodes to more than that
// (a decompression bomb, or simply a huge body) stops being decoded at the
// cap and the feed reports DecodeLimit. Decoding costs time in proportion
// to the decoded bytes, so the cap bounds the time one body can take.

const (
	// maxDecodedBytes is how many decoded bytes one body may produce
	// before decoding stops (64 MiB). An LLM response is far smaller; a
	// body past it is reported as DecodeLimit and the scan ends there.
	maxDecodedBytes = 64 << 20

	// maxZstdWindow is the largest zstd window accepted (8 MiB): RFC 9659
	// has HTTP zstd encoders stay within it, and decoders may refuse
	// more. A single-segment frame's window is its content size.
	maxZstdWindow = 8 << 20

	// decodeBufSize is the size of the buffer decoded bytes are read into
	// and handed to the sink from.
	decodeBufSize = 32 << 10
)

// DecodeReason says why a body's Content-Encoding could not be decoded, or
// why decoding stopped before the end of the body.
type DecodeReason uint8

const (
	// DecodeUnsupported: a content coding this package does not decode
	// (e.g. "compress", "exi", an unknown token).
	DecodeUnsupported DecodeReason = iota + 1
	// DecodeChain: more than one coding was applied ("gzip, br"); chains
	// are not decoded.
	DecodeChain
	// DecodeCorrupt: the encoded bytes are not a valid stream of the
	// declared coding (bad header, bad block, bad checksum, trailing
	// garbage the decoder rejects).
	DecodeCorrupt
	// DecodeTruncated: the body ended before the encoded stream did.
	DecodeTruncated
	// DecodeWindowTooLarge: a zstd frame declares a window above 8 MiB
	// (RFC 9659); it is refused rather than allocated.
	DecodeWindowTooLarge
	// DecodeLimit: the body decoded to more than 64 MiB; decoding stopped
	// there, so a decompression bomb costs bounded time.
	DecodeLimit
	// DecodeMessageTooLarge: an AWS event-stream message is longer than
	// 1 MiB; the stream is not read past it.
	DecodeMessageTooLarge
)

var decodeReasonText = [...]string{
	DecodeUnsupported:     "unsupported content coding",
	DecodeChain:           "content-coding chain",
	DecodeCorrupt:         "corrupt encoded body",
	DecodeTruncated:       "truncated encoded body",
	DecodeWindowTooLarge:  "zstd window above 8 MiB",
	DecodeLimit:           "decoded body above 64 MiB",
	DecodeMessageTooLarge: "event-stream message above 1 MiB",
}

// String returns a short description of r, e.g. "corrupt encoded body".
func (r DecodeReason) String() string {
	if int(r) < len(decodeReasonText) && decodeReasonText[r] != "" {
		return decodeReasonText[r]
	}
	return fmt.Sprintf("DecodeReason(%d)", uint8(r))
}

// DecodeError reports a body whose encoding was not, or not wholly,
// decoded. Coding is the Content-Encoding as the response declared it
// (trimmed), or "application/vnd.amazon.eventstream" for an AWS event
// stream whose framing failed; Err is the decoder's own error, if any. What was decoded
// before the failure has already been handed on and stands: those bytes
// were really sent, and the scanner treats the body as cut at that point.
type DecodeError struct {
	Coding string
	Reason DecodeReason
	Err    error
}

// Error says why the body was not decoded, with the coding and the
// decoder's own error when there are any.
func (e *DecodeError) Error() string {
	msg := "llmrate: encoding not decoded: " + e.Reason.String()
	if e.Coding != "" {
		msg += fmt.Sprintf(" (%q)", e.Coding)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the decoder's own error.
func (e *DecodeError) Unwrap() error { return e.Err }

// coding is one Content-Encoding this file decodes.
type coding uint8

const (
	codingIdentity coding = iota
	codingGzip
	codingDeflate
	codingBrotli
	codingZstd
)

// codings maps a content-coding token (lower case) to its decoder.
// "identity" is accepted although RFC 9110 reserves it for Accept-Encoding.
var codings = map[string]coding{
	"identity": codingIdentity,
	"gzip":     codingGzip,
	"x-gzip":   codingGzip,
	"deflate":  codingDeflate,
	"br":       codingBrotli,
	"zstd":     codingZstd,
}

// parseCoding reads a Content-Encoding header value. Empty list elements
// and "identity" elements are skipped; zero remaining codings is identity,
// one is decoded, more is a chain and refused.
func parseCoding(contentEncoding string) (coding, error) {
	header := strings.TrimSpace(contentEncoding)
	found := codingIdentity
	n := 0
	for tok := range strings.SplitSeq(header, ",") {
		tok = strings.ToLower(strings.TrimSpace(tok))
		if tok == "" || tok == "identity" {
			continue
		}
		c, ok := codings[tok]
		if !ok {
			return 0, &DecodeError{Coding: header, Reason: DecodeUnsupported}
		}
		found = c
		n++
	}
	if n > 1 {
		return 0, &DecodeError{Coding: header, Reason: DecodeChain}
	}
	return found, nil
}

// decodeFeed decodes one body pushed to it in writes and hands the decoded
// bytes to its sink, from a goroutine of its own (the decoders are pull
// readers). Writes, close and the sink follow a strict hand-off: when
// write or close returns, the goroutine is parked waiting for input (or
// gone), and the sink has been handed everything the decoder released
// before asking for that input. (A decoder may hold back output it has not
// finished, e.g. inside a deflate block; the encoder's flush points
// release it, so a flushed event is scanned when the write carrying the
// flush returns.) So the sink never runs concurrently with the feed's
// caller, and the state it builds may be read between writes without
// locking.
//
// A feed is used by one goroutine at a time. The zero value is not usable;
// see newDecodeFeed.
type decodeFeed struct {
	coding coding
	header string
	sink   func([]byte)
	limit  int64 // decoded bytes allowed; maxDecodedBytes outside tests

	started bool
	closed  bool
	in      chan []byte   // a write's bytes, lent to the goroutine
	ack     chan struct{} // the goroutine has used up the lent bytes
	done    chan struct{} // closed when the goroutine has returned
	err     error         // set by the goroutine before done is closed
	decoded int64         // decoded bytes handed to the sink
}

// newDecodeFeed returns a feed decoding a body with the given
// Content-Encoding header value and handing decoded bytes to sink. sink
// must not keep the slice it is given. An unknown coding or a chain
// returns a *DecodeError and no feed; the caller leaves the body unscanned
// and reports the error. With identity the feed calls sink with the
// written slices themselves, synchronously.
//
// The decoder goroutine starts at the first non-empty write, so a body
// with no bytes costs nothing; close must be called to end it.
func newDecodeFeed(contentEncoding string, sink func([]byte)) (*decodeFeed, error) {
	c, err := parseCoding(contentEncoding)
	if err != nil {
		return nil, err
	}
	return &decodeFeed{
		coding: c,
		header: strings.TrimSpace(contentEncoding),
		sink:   sink,
		limit:  maxDecodedBytes,
	}, nil
}

// write feeds the next encoded bytes of the body. p is only read, and not
// retained once write returns. After a failure (see close) writes are
// dropped.
func (f *decodeFeed) write(p []byte) {
	if len(p) == 0 || f.closed {
		return
	}
	if f.coding == codingIdentity {
		f.decoded += int64(len(p))
		f.sink(p)
		return
	}
	if !f.started {
		f.start()
	}
	select {
	case f.in <- p:
	case <-f.done:
		return
	}
	select {
	case <-f.ack:
	case <-f.done:
	}
}

// close ends the body, waits for the decoder goroutine to finish and
// returns nil if the whole body was decoded, else a *DecodeError saying
// why not. close may be called more than once; it returns the same result.
func (f *decodeFeed) close() error {
	if !f.closed {
		f.closed = true
		if f.started {
			close(f.in)
		}
	}
	if f.started {
		<-f.done
	}
	return f.err
}

// failed reports whether decoding has already stopped with an error. It is
// exact between writes (see decodeFeed).
func (f *decodeFeed) failed() bool {
	if !f.started {
		return false
	}
	select {
	case <-f.done:
		return f.err != nil
	default:
		return false
	}
}

func (f *decodeFeed) start() {
	f.started = true
	f.in = make(chan []byte)
	f.ack = make(chan struct{})
	f.done = make(chan struct{})
	go f.run()
}

// run is the decoder goroutine: it pulls the lent write buffers through
// the coding's reader and pushes decoded bytes to the sink.
func (f *decodeFeed) run() {
	defer close(f.done)
	// A panic here (a decoder library's bug on hostile input, or the
	// sink's) would otherwise end the whole process: it ends this body's
	// decoding instead, reported like a corrupt body.
	defer func() {
		if v := recover(); v != nil {
			f.err = &DecodeError{Coding: f.header, Reason: DecodeCorrupt, Err: fmt.Errorf("decoder panic: %v", v)}
		}
	}()
	src := &lentReader{in: f.in, ack: f.ack}
	r, cleanup, err := f.open(src)
	if err == nil {
		err = f.pump(r)
	}
	if cleanup != nil {
		cleanup(err == nil)
	}
	if err != nil {
		f.err = f.classify(err)
	}
}

// open builds the reader for the feed's coding over src. Every reader is
// handed an io.ByteReader (bufio) where the library would otherwise wrap
// src itself, so the only input buffer is the one made here. cleanup is
// called once the body is done, clean when it decoded to its end.
func (f *decodeFeed) open(src io.Reader) (r io.Reader, cleanup func(clean bool), err error) {
	switch f.coding {
	case codingGzip:
		zr, err := gzip.NewReader(bufio.NewReaderSize(src, 4096))
		if err != nil {
			return nil, nil, err
		}
		return zr, func(bool) { _ = zr.Close() }, nil
	case codingDeflate:
		br := bufio.NewReaderSize(src, 4096)
		head, err := br.Peek(2)
		if err != nil {
			return nil, nil, err
		}
		if isZlibHeader(head[0], head[1]) {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, nil, err
			}
			return zr, func(bool) { _ = zr.Close() }, nil
		}
		// Raw deflate (RFC 1951), as some servers send for "deflate".
		fr := flate.NewReader(br)
		return fr, func(bool) { _ = fr.Close() }, nil
	case codingBrotli:
		// brotli.Reader keeps its own 32 KiB input buffer.
		return brotli.NewReader(src), nil, nil
	case codingZstd:
		zd, err := getZstdDecoder()
		if err == nil {
			err = zd.Reset(src)
		}
		if err != nil {
			if zd != nil {
				zd.Close()
			}
			return nil, nil, err
		}
		return zd, func(clean bool) { putZstdDecoder(zd, clean) }, nil
	}
	return nil, nil, fmt.Errorf("coding %d has no reader", f.coding)
}

// zstdDecoders holds idle zstd decoders, each with the window and tables
// its last frame needed (a window is up to 8 MiB: allocating one per body
// would cost more than decoding a small body). sync.Pool drops idle ones
// at garbage collections, so memory follows the number of zstd bodies
// decoded at once.
var zstdDecoders sync.Pool

func getZstdDecoder() (*zstd.Decoder, error) {
	if zd, ok := zstdDecoders.Get().(*zstd.Decoder); ok {
		return zd, nil
	}
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1), // decode in the feed's goroutine, no workers
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxZstdWindow),
		zstd.WithDecoderMaxMemory(maxDecodedBytes),
	)
}

// putZstdDecoder returns a decoder whose body decoded cleanly to the pool,
// holding no reference to that body's input; a decoder left in any other
// state (a corrupt or oversized frame, a body cut at the decoded-bytes
// cap) is closed rather than reused.
func putZstdDecoder(zd *zstd.Decoder, clean bool) {
	if clean && zd.Reset(nil) == nil {
		zstdDecoders.Put(zd)
		return
	}
	zd.Close()
}

// isZlibHeader reports whether two bytes open a zlib stream (RFC 1950):
// compression method 8 (deflate), a window of at most 32 KiB, and a header
// check that makes the big-endian pair a multiple of 31. A raw deflate
// stream starting this way would need a stored block with set padding
// bits, which no encoder writes.
func isZlibHeader(cmf, flg byte) bool {
	return cmf&0x0f == 8 && cmf>>4 <= 7 && (uint16(cmf)<<8|uint16(flg))%31 == 0
}

// pump copies decoded bytes to the sink until the stream ends, fails or
// passes the decoded-bytes limit.
func (f *decodeFeed) pump(r io.Reader) error {
	buf := make([]byte, decodeBufSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if room := f.limit - f.decoded; int64(n) > room {
				f.decoded += room
				f.sink(buf[:room])
				return errDecodeLimit
			}
			f.decoded += int64(n)
			f.sink(buf[:n])
		}
		if err == io.EOF || isBrotliEnd(err) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// isBrotliEnd reports brotli.Reader's "excessive input" error, which it
// returns with the last decoded bytes when the stream has ended but it
// still holds input. With input fed in very small pieces it also returns
// it when the stream's final bits sat in its internal byte-by-byte buffer,
// although nothing follows the stream (every fixture split into one-byte
// writes shows it). Either way the stream is complete and all its output
// was returned, so it is taken as the end of the stream: bytes after a
// complete br stream are not reported.
func isBrotliEnd(err error) bool {
	return err != nil && err.Error() == "brotli: excessive input"
}

var errDecodeLimit = errors.New("decoded-bytes limit reached")

// classify turns a decoder error into a *DecodeError.
func (f *decodeFeed) classify(err error) *DecodeError {
	reason := DecodeCorrupt
	switch {
	case errors.Is(err, errDecodeLimit):
		reason, err = DecodeLimit, nil
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		// io.EOF here: the body ended before a gzip header or the two
		// bytes a deflate stream is sniffed by.
		reason = DecodeTruncated
	case errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		reason = DecodeWindowTooLarge
	}
	return &DecodeError{Coding: f.header, Reason: reason, Err: err}
}

// lentReader reads the buffers a decodeFeed's writes lend it. When a
// buffer is used up and more input is needed, it acknowledges the write
// (which may then return) and waits for the next one; a closed channel is
// the end of the body.
type lentReader struct {
	in   <-chan []byte
	ack  chan<- struct{}
	cur  []byte
	owed bool // the current buffer's write is waiting for its ack
}

func (r *lentReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.owed {
			r.owed = false
			r.cur = nil // the write's slice is no longer referenced
			r.ack <- struct{}{}
		}
		b, ok := <-r.in
		if !ok {
			return 0, io.EOF
		}
		r.cur, r.owed = b, true
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
