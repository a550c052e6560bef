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
	// FramingEventStream: application/vnd.amazon.eventstream (Amazon
	// Bedrock), each event message's JSON payload is a document, read as
	// one complete NDJSON line is; exception and error messages are never
	// documents.
	FramingEventStream
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
	switch len(mt) { // EqualFold only where the length can match
	case len("application/json"):
		if strings.EqualFold(mt, "application/json") {
			return FramingJSON
		}
	case len("text/event-stream"):
		if strings.EqualFold(mt, "text/event-stream") {
			return FramingSSE
		}
	case len("application/x-ndjson"):
		if strings.EqualFold(mt, "application/x-ndjson") {
			return FramingNDJSON
		}
	case len(esCoding):
		if strings.EqualFold(mt, esCoding) {
			return FramingEventStream
		}
	}
	return FramingNone
}

// Scanner finds the usage a provider reported, and the generated text it
// sent, in a response body as it streams past, in constant memory, without
// ever blocking or altering the body. Feed it with Write, then call Finish
// once at the end of the body; only the usage object at a provider's
// documented place counts, never look-alike text.
//
// A Scanner for an encoded body (gzip, deflate, br, zstd) decodes it on a
// goroutine of its own, started by the first Write: Finish, Close or Reset
// joins it, so a scanner that is written to must be finished or closed. A Scanner is not safe for
// concurrent use. The zero value is not usable; use NewScanner.
type Scanner struct {
	frame       Framing
	js          jsonScan
	acc         accumulator
	n           int64 // body bytes seen (decoded)
	sse         sseState
	lineLen     int64           // NDJSON: bytes of the current line
	dec         *decodeFeed     // nil for identity
	es          eventStreamFeed // FramingEventStream
	docFn       func([]byte)    // s.esDoc, bound once
	decErr      error           // why the body was not (wholly) decoded
	esException string          // the event stream's first exception, once finished
	feedFn      func([]byte)    // s.feed, bound once
	pending     bool
	usageOnly   bool // the event just dispatched was OpenAI's usage-only chunk
}

// NewScanner returns a scanner for a body with the given Content-Type and
// Content-Encoding. A body whose type carries no usage (HTML, plain text,
// none) is accepted and reports nothing. A Content-Encoding other than
// identity, gzip, deflate, br and zstd, or a chain of them ("gzip, br"), is
// not scanned: Finish reports it in Result.DecodeErr.
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
	s.acc.reset()
	s.js.init(&s.acc, s.frame == FramingJSON)
	s.n, s.lineLen, s.pending, s.usageOnly, s.decErr, s.esException = 0, 0, false, false, nil, ""
	s.sse.reset()
	if s.frame == FramingNone {
		return
	}
	if s.frame == FramingEventStream {
		if s.docFn == nil {
			s.docFn = s.esDoc
		}
		s.es.reset(s.docFn)
		if s.es.dec == nil {
			s.es = *newEventStreamFeed(s.docFn)
		}
	}
	if contentEncoding == "" {
		return // identity, the common case: fed directly
	}
	if s.feedFn == nil {
		s.feedFn = s.feed
	}
	dec, err := newDecodeFeed(contentEncoding, s.feedFn)
	switch {
	case err != nil:
		s.frame, s.decErr = FramingNone, err // not scanned; the estimate stands
	case dec.coding != codingIdentity:
		s.dec = dec
	}
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
// NDJSON line without a newline is used; an event-stream message not
// complete is discarded (and sets PendingEvent). A body that could not be
// wholly decoded, or an event stream with an exception message, did not
// complete: see Result.DecodeErr and Result.Exception. Calling Finish again
// returns the same Result.
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
	case FramingEventStream:
		if err := s.es.close(); err != nil && s.decErr == nil {
			s.decErr = err
		}
		// A body that failed to decode ends mid-message too; only a clean
		// end inside a message is "pending".
		s.pending = s.es.pending() && s.decErr == nil
		s.esException = s.es.exceptionType()
		s.es.reset(s.docFn) // drop the held partial message
	}
	s.frame = FramingNone
	r := s.acc.result()
	r.PendingEvent, r.Bytes, r.DecodeErr, r.Exception = s.pending, s.n, s.decErr, s.esException
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
// everything it decoded. A body not wholly decoded is kept as decErr: what
// was decoded before the failure stands, and the body counts as cut there.
func (s *Scanner) closeDecoder() {
	if s.dec != nil {
		if err := s.dec.close(); err != nil && s.decErr == nil {
			s.decErr = err
		}
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
	case FramingEventStream:
		s.es.write(p)
	}
}

// esDoc scans one event-stream document as one complete NDJSON line.
func (s *Scanner) esDoc(doc []byte) {
	s.js.write(doc)
	s.js.end()
}

// writeEvent feeds one complete SSE event (through its empty line) and
// reports whether it was OpenAI's usage-only chunk. Only a scanner without
// a decoder can tell.
func (s *Scanner) writeEvent(ev []byte) bool {
	s.usageOnly = false
	_, _ = s.Write(ev)
	return s.usageOnly && s.dec == nil
}
