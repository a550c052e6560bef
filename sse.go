package llmrate

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
)

// Body framings.
const (
	frameNone   = iota // no usage can be in this body
	frameJSON          // application/json: one JSON text (or an array of documents)
	frameSSE           // text/event-stream: each event's data is a document
	frameNDJSON        // application/x-ndjson: each line is a document
)

// framingFor chooses the framing from a Content-Type (case-insensitive,
// parameters ignored).
func framingFor(contentType string) uint8 {
	switch contentType { // the common exact spellings, without parsing
	case "application/json":
		return frameJSON
	case "text/event-stream":
		return frameSSE
	}
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.TrimSpace(mt)
	switch {
	case strings.EqualFold(mt, "application/json"):
		return frameJSON
	case strings.EqualFold(mt, "text/event-stream"):
		return frameSSE
	case strings.EqualFold(mt, "application/x-ndjson"):
		return frameNDJSON
	}
	return frameNone
}

// SSE line phases.
const (
	lineField  = iota // reading the field name
	lineDataSp        // after "data:": an optional single space
	lineData          // inside a data value: bytes go to the JSON parser
	lineSkip          // a comment or a field other than data
)

// UsageScanner finds the provider-reported token usage in a response body
// as it streams past, in constant memory, without ever blocking or altering
// the body. Feed it with Write, then call Finish once at the end of the body.
// It follows the counting rules of fixtures/usage/README.md: only the usage
// object at a provider's documented place counts, never look-alike text.
//
// A UsageScanner is not safe for concurrent use. The zero value is not
// usable; use NewUsageScanner.
type UsageScanner struct {
	frame uint8
	js    jsonScan
	acc   usageAcc
	n     int64 // body bytes seen (decoded)

	// SSE
	phase   uint8
	field   [5]byte
	flen    uint8
	afterCR bool
	hasData bool
	evStart bool  // at the first byte of an event: the skip test may run
	bom     uint8 // BOM bytes matched at the start of the stream
	started bool

	// NDJSON
	lineLen int64

	gz      *gzipFeed
	pending bool
}

// NewUsageScanner returns a scanner for a body with the given Content-Type
// and Content-Encoding. A body whose type carries no usage (HTML, plain
// text, none) or whose encoding is not gzip or identity is accepted and
// reports nothing.
func NewUsageScanner(contentType, contentEncoding string) *UsageScanner {
	s := new(UsageScanner)
	s.reset(contentType, contentEncoding)
	return s
}

func (s *UsageScanner) reset(contentType, contentEncoding string) {
	s.frame = framingFor(contentType)
	s.acc = usageAcc{}
	s.js.init(&s.acc, s.frame == frameJSON)
	s.n, s.phase, s.flen, s.afterCR, s.hasData, s.bom, s.started, s.lineLen, s.pending = 0, lineField, 0, false, false, 0, false, 0, false
	s.evStart = true
	s.gz = nil
	switch enc := strings.TrimSpace(contentEncoding); {
	case enc == "" || strings.EqualFold(enc, "identity"):
	case strings.EqualFold(enc, "gzip") || strings.EqualFold(enc, "x-gzip"):
		if s.frame != frameNone {
			s.gz = newGzipFeed(s)
		}
	default:
		s.frame = frameNone // br, zstd, deflate…: not scanned; the estimate stands
	}
}

// Reset makes s ready for a new body, keeping its memory.
func (s *UsageScanner) Reset(contentType, contentEncoding string) {
	if s.gz != nil {
		s.gz.close()
	}
	s.reset(contentType, contentEncoding)
}

// Write feeds body bytes as they were sent to the client. It never fails.
func (s *UsageScanner) Write(p []byte) (int, error) {
	if s.gz != nil {
		s.gz.write(p)
	} else {
		s.feed(p)
	}
	return len(p), nil
}

// Bytes returns how many (decoded) body bytes the scanner has seen. With a
// gzip body it is exact only after Finish.
func (s *UsageScanner) Bytes() int64 { return s.n }

// Finish ends the body and returns the usage reported in it; ok is false
// when no valid report was seen. An SSE event not terminated by an empty
// line is discarded; a final NDJSON line without a newline is used.
func (s *UsageScanner) Finish() (u Usage, ok bool) {
	if s.gz != nil {
		s.gz.close()
		s.gz = nil
	}
	switch s.frame {
	case frameJSON:
		s.js.end()
	case frameNDJSON:
		if s.lineLen > 0 {
			s.js.end()
		}
	}
	s.pending = s.frame == frameSSE && (s.hasData || s.phase != lineField || s.flen > 0)
	s.frame = frameNone
	return s.acc.result()
}

// PendingEvent reports, after Finish, whether the body stopped in the middle
// of an SSE event (a stream cut off mid-event).
func (s *UsageScanner) PendingEvent() bool { return s.pending }

// Seen returns the usage accepted so far.
func (s *UsageScanner) Seen() (Usage, bool) { return s.acc.result() }

// feed processes decoded body bytes.
func (s *UsageScanner) feed(p []byte) {
	s.n += int64(len(p))
	switch s.frame {
	case frameJSON:
		s.js.write(p)
	case frameSSE:
		s.feedSSE(p)
	case frameNDJSON:
		for len(p) > 0 {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.lineLen += int64(len(p))
				s.js.write(p)
				return
			}
			s.js.write(p[:i])
			if s.lineLen+int64(i) > 0 {
				s.js.end()
			}
			s.lineLen = 0
			p = p[i+1:]
		}
	}
}

var bom = [3]byte{0xEF, 0xBB, 0xBF}

func (s *UsageScanner) feedSSE(p []byte) {
	if !s.started {
		// Skip a UTF-8 BOM at the very start, even split across writes.
		for len(p) > 0 && s.bom < 3 && p[0] == bom[s.bom] {
			s.bom++
			p = p[1:]
		}
		if len(p) == 0 && s.bom < 3 {
			return
		}
		s.started = true
		if s.bom > 0 && s.bom < 3 {
			held := bom[:s.bom]
			s.feedSSELines(held)
		}
	}
	s.feedSSELines(p)
}

func (s *UsageScanner) feedSSELines(p []byte) {
	for i := 0; i < len(p); {
		c := p[i]
		if s.afterCR {
			s.afterCR = false
			if c == '\n' {
				i++
				continue
			}
		}
		switch s.phase {
		case lineField:
			if s.evStart {
				// Fast path, tried once per event at its first byte: a whole
				// event in this write that cannot hold a usage report is
				// skipped without parsing.
				if n := skippableEvent(p[i:]); n > 0 {
					i += n
					s.afterCR = p[i-1] == '\r'
					continue
				}
				s.evStart = c == '\r' || c == '\n'
			}
			if s.flen == 0 && len(p)-i >= 5 && string(p[i:i+5]) == "data:" {
				// Fast path: a data line.
				s.flen, s.phase = 4, lineDataSp
				i += 5
				continue
			}
			switch c {
			case '\r', '\n':
				s.endLine(c)
			case ':':
				s.phase = lineSkip
				if s.flen == 4 && string(s.field[:4]) == "data" {
					s.phase = lineDataSp
				}
			default:
				if int(s.flen) < len(s.field) {
					s.field[s.flen] = c
				}
				if s.flen < 255 {
					s.flen++
				}
			}
			i++
		case lineDataSp:
			s.beginData()
			if c == ' ' {
				i++
			}
		case lineData:
			j := lineLen(p[i:])
			s.js.write(p[i : i+j])
			i += j
			if i < len(p) {
				s.endLine(p[i])
				i++
			}
		case lineSkip:
			i += lineLen(p[i:])
			if i < len(p) {
				s.endLine(p[i])
				i++
			}
		}
	}
}

var (
	markUsage     = []byte("usage")
	markNullUsage = []byte(`"usage":null`)
	markMeta      = []byte("meta")
	markEval      = []byte("eval_count")
	markEscape    = []byte(`\u`)
)

// skippableEvent returns the length of the complete event at the start of b
// (through its empty line) if it cannot contain a usage report, else 0.
//
// A report needs a member named usage or usageMetadata (paths 1–5 and 7),
// meta (6) or [prompt_]eval_count (8) whose value is not null. A member name
// cannot span lines (a JSON string holds no raw line break) and, short of a
// \u escape, is spelled literally. So an event with no \u, no "meta", no
// "eval_count" and whose every "usage" is a literal `"usage":null` (the
// filler of OpenAI streams with include_usage) has no report, whether or
// not it is valid JSON. Anything else is parsed in full.
func skippableEvent(b []byte) int {
	end := fastEventEnd(b)
	if end <= 0 {
		return 0
	}
	ev := b[:end]
	if bytes.Contains(ev, markEscape) || bytes.Contains(ev, markMeta) || bytes.Contains(ev, markEval) {
		return 0
	}
	if n := bytes.Count(ev, markUsage); n > 0 && n != bytes.Count(ev, markNullUsage) {
		return 0
	}
	return end
}

// fastEventEnd returns what eventEnd does, a line at a time with SIMD
// searches: linear in the event's own length, never in what follows it.
// Lines broken by CR, and a leading empty line, take the careful walk.
func fastEventEnd(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	if b[0] == '\n' || b[0] == '\r' {
		return eventEnd(b)
	}
	pos := 0
	for {
		j := bytes.IndexByte(b[pos:], '\n')
		if j < 0 {
			if bytes.IndexByte(b[pos:], '\r') >= 0 {
				return eventEnd(b) // lines broken by CR alone
			}
			return -1
		}
		if bytes.IndexByte(b[pos:pos+j], '\r') >= 0 {
			return eventEnd(b)
		}
		pos += j + 1
		switch {
		case pos == len(b):
			return -1
		case b[pos] == '\n':
			return pos + 1
		case b[pos] == '\r':
			return eventEnd(b)
		}
	}
}

// lineLen returns the length of the line at the start of p, up to (not
// including) its CR or LF, or all of p when it has neither.
func lineLen(p []byte) int {
	j := bytes.IndexByte(p, '\n')
	if j < 0 {
		j = len(p)
	}
	if k := bytes.IndexByte(p[:j], '\r'); k >= 0 {
		j = k
	}
	return j
}

// beginData starts a data line: lines of one event are joined with "\n".
func (s *UsageScanner) beginData() {
	if s.hasData {
		s.js.write([]byte{'\n'})
	}
	s.hasData = true
	s.phase = lineData
}

// endLine handles a line break c ('\r' or '\n').
func (s *UsageScanner) endLine(c byte) {
	switch s.phase {
	case lineField:
		if s.flen == 0 {
			// An empty line dispatches the event.
			if s.hasData {
				s.js.end()
				s.hasData = false
			}
			s.evStart = true
		} else if s.flen == 4 && string(s.field[:4]) == "data" {
			s.beginData() // "data" with no colon: an empty value
		}
	case lineDataSp:
		s.beginData()
	}
	s.phase, s.flen = lineField, 0
	s.afterCR = c == '\r'
}

// gzipFeed inflates a gzip body for scanning only. Writes are handed to a
// goroutine through a synchronous pipe, so no compressed bytes are held
// beyond the decompressor's own window; close joins the goroutine.
type gzipFeed struct {
	pw   *io.PipeWriter
	done chan struct{}
}

func newGzipFeed(s *UsageScanner) *gzipFeed {
	pr, pw := io.Pipe()
	g := &gzipFeed{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		defer pr.Close() // unblocks the writer if inflating stops early
		zr, err := gzip.NewReader(pr)
		if err != nil {
			return
		}
		buf := make([]byte, 16<<10)
		for {
			n, err := zr.Read(buf)
			s.feed(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	return g
}

func (g *gzipFeed) write(p []byte) { _, _ = g.pw.Write(p) }

func (g *gzipFeed) close() {
	_ = g.pw.Close()
	<-g.done
}
