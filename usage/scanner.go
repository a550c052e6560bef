package usage

import "strings"

// Framing is how a body is cut into JSON documents, chosen by its
// Content-Type.
type Framing uint8

const (
	// FramingNone: no usage can be in this body (HTML, plain text, no body,
	// or an encoding the scanner cannot decode).
	FramingNone Framing = iota
	// FramingJSON: application/json, one JSON text; a top-level array is a
	// sequence of documents, one per element.
	FramingJSON
	// FramingSSE: text/event-stream, each event's data is a document.
	FramingSSE
	// FramingNDJSON: application/x-ndjson, each line is a document.
	FramingNDJSON
)

// framingFor chooses the framing from a Content-Type (case-insensitive,
// parameters ignored).
func framingFor(contentType string) Framing {
	switch contentType { // the common exact spellings, without parsing
	case "application/json":
		return FramingJSON
	case "text/event-stream":
		return FramingSSE
	}
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.TrimSpace(mt)
	switch {
	case strings.EqualFold(mt, "application/json"):
		return FramingJSON
	case strings.EqualFold(mt, "text/event-stream"):
		return FramingSSE
	case strings.EqualFold(mt, "application/x-ndjson"):
		return FramingNDJSON
	}
	return FramingNone
}

// decoder undoes a Content-Encoding on the side: write takes encoded body
// bytes and the decoded bytes reach the scanner's feed, in order; close
// ends the input and returns once every decoded byte has been fed (it joins
// any goroutine the decoder started), with an error if the body was not
// wholly decoded. A decoder that meets bytes it cannot decode stops feeding
// and swallows the rest. (decode.go's *decodeFeed has this shape.)
type decoder interface {
	write(p []byte)
	close() error
}

// newDecoder returns the decoder for a Content-Encoding that feeds s: nil
// for identity, ok false for an encoding the scanner cannot decode.
func newDecoder(contentEncoding string, s *Scanner) (d decoder, ok bool) {
	switch enc := strings.TrimSpace(contentEncoding); {
	case enc == "" || strings.EqualFold(enc, "identity"):
		return nil, true
	case strings.EqualFold(enc, "gzip") || strings.EqualFold(enc, "x-gzip"):
		return &gzipDecoder{to: s}, true
	}
	return nil, false
}

// Scanner finds the usage a provider reported, and the generated text it
// sent, in a response body as it streams past, in constant memory, without
// ever blocking or altering the body. Feed it with Write, then call Finish
// once at the end of the body; only the usage object at a provider's
// documented place counts, never look-alike text.
//
// A Scanner for a gzip body inflates it on a goroutine of its own, started
// by the first Write: Finish, Close or Reset joins it, so a scanner that is
// written to must be finished or closed. A Scanner is not safe for
// concurrent use. The zero value is not usable; use NewScanner.
type Scanner struct {
	frame     Framing
	js        jsonScan
	acc       accumulator
	n         int64 // body bytes seen (decoded)
	sse       sseState
	lineLen   int64 // NDJSON: bytes of the current line
	dec       decoder
	pending   bool
	usageOnly bool // the event just dispatched was OpenAI's usage-only chunk
}

// NewScanner returns a scanner for a body with the given Content-Type and
// Content-Encoding. A body whose type carries no usage (HTML, plain text,
// none) or whose encoding is not gzip or identity is accepted and reports
// nothing.
func NewScanner(contentType, contentEncoding string) *Scanner {
	s := new(Scanner)
	s.Reset(contentType, contentEncoding)
	return s
}

// Reset makes s ready for a new body, keeping its memory; it closes s
// first.
func (s *Scanner) Reset(contentType, contentEncoding string) {
	s.Close()
	s.frame = framingFor(contentType)
	s.acc = accumulator{}
	s.js.init(&s.acc, s.frame == FramingJSON)
	s.n, s.lineLen, s.pending, s.usageOnly = 0, 0, false, false
	s.sse.reset()
	if s.frame == FramingNone {
		return
	}
	dec, ok := newDecoder(contentEncoding, s)
	if !ok {
		s.frame = FramingNone // br, zstd, deflate…: not scanned; the estimate stands
	}
	s.dec = dec
}

// Framing returns how the body is framed (FramingNone once finished).
func (s *Scanner) Framing() Framing { return s.frame }

// Write feeds body bytes as they were sent to the client. It never fails.
func (s *Scanner) Write(p []byte) (int, error) {
	if s.dec != nil {
		s.dec.write(p)
	} else {
		s.feed(p)
	}
	return len(p), nil
}

// Finish ends the body and returns what it held. An SSE event not
// terminated by an empty line is discarded (and sets PendingEvent); a final
// NDJSON line without a newline is used. Calling Finish again returns the
// same Result.
func (s *Scanner) Finish() Result {
	s.closeDecoder()
	switch s.frame {
	case FramingJSON:
		s.js.end()
	case FramingNDJSON:
		if s.lineLen > 0 {
			s.js.end()
		}
	case FramingSSE:
		s.pending = s.sse.midEvent()
	}
	s.frame = FramingNone
	r := s.acc.result()
	r.PendingEvent, r.Bytes = s.pending, s.n
	return r
}

// Close abandons the body: it stops scanning and joins the decoder's
// goroutine, if any; bytes written afterwards are only counted. Finish and
// Reset close s too; Close is for a body abandoned without a result. It is
// safe to call more than once.
func (s *Scanner) Close() {
	s.closeDecoder()
	s.frame = FramingNone
}

// closeDecoder ends the decoder's input and waits until it fed the scanner
// everything it decoded.
func (s *Scanner) closeDecoder() {
	if s.dec != nil {
		_ = s.dec.close() // not reported yet: the body is simply scanned as far as it decoded
		s.dec = nil
	}
}

// feed processes decoded body bytes.
func (s *Scanner) feed(p []byte) {
	s.n += int64(len(p))
	switch s.frame {
	case FramingJSON:
		s.js.write(p)
	case FramingSSE:
		s.feedSSE(p)
	case FramingNDJSON:
		s.feedNDJSON(p)
	}
}

// writeEvent feeds one complete SSE event (through its empty line) and
// reports whether it was OpenAI's usage-only chunk. Only a scanner without
// a decoder can tell.
func (s *Scanner) writeEvent(ev []byte) bool {
	s.usageOnly = false
	_, _ = s.Write(ev)
	return s.usageOnly && s.dec == nil
}
