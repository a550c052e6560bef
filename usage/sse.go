package usage

import "bytes"

// Server-Sent Events framing (WHATWG "event stream interpretation"): lines
// end with CRLF, LF or a lone CR; a line starting with ':' is a comment;
// the data lines of one event are joined with "\n" and fed to the JSON
// parser as they come; an empty line dispatches the event; an event not
// terminated by an empty line is discarded at the end.

// linePhase is the position within an SSE line.
type linePhase uint8

const (
	lineField  linePhase = iota // reading the field name
	lineDataSp                  // after "data:": an optional single space
	lineData                    // inside a data value: bytes go to the JSON parser
	lineSkip                    // a comment or a field other than data
)

type sseState struct {
	phase   linePhase
	field   [5]byte
	flen    uint8
	afterCR bool
	hasData bool
	evStart bool  // at the first byte of an event: the skip test may run
	bom     uint8 // BOM bytes matched at the start of the stream
	started bool
	// The skip test is an optimisation only (a full parse is always
	// right): after it fails, it waits skipWait events before trying
	// again, the wait doubling up to 31 while it keeps failing, so a
	// stream whose every event carries text (a content-delta stream, now
	// that text is counted) does not pay for it on every event.
	skipWait, skipBackoff uint8
}

func (e *sseState) reset() { *e = sseState{evStart: true} }

// midEvent reports whether the stream stopped inside an event.
func (e *sseState) midEvent() bool { return e.hasData || e.phase != lineField || e.flen > 0 }

var bom = [3]byte{0xEF, 0xBB, 0xBF}

func (s *Scanner) feedSSE(p []byte) {
	if e := &s.sse; !e.started {
		// Skip a UTF-8 BOM at the very start, even split across writes.
		for len(p) > 0 && e.bom < 3 && p[0] == bom[e.bom] {
			e.bom++
			p = p[1:]
		}
		if len(p) == 0 && e.bom < 3 {
			return
		}
		e.started = true
		if e.bom > 0 && e.bom < 3 {
			s.feedSSELines(bom[:e.bom])
		}
	}
	s.feedSSELines(p)
}

// feedSSELines dispatches each byte run to the method of the line phase.
func (s *Scanner) feedSSELines(p []byte) {
	for i := 0; i < len(p); {
		if s.sse.afterCR {
			s.sse.afterCR = false
			if p[i] == '\n' {
				i++
				continue
			}
		}
		switch s.sse.phase {
		case lineField:
			i = s.fieldName(p, i)
		case lineDataSp:
			s.beginData()
			if p[i] == ' ' {
				i++
			}
		case lineData:
			j := i + lineLen(p[i:])
			s.js.write(p[i:j])
			i = s.lineEnd(p, j)
		case lineSkip:
			i = s.lineEnd(p, i+lineLen(p[i:]))
		}
	}
}

// fieldName reads a line's field name, with two fast paths: a whole event
// that cannot hold a report or generated text is skipped at its first byte,
// and a "data:" line is recognised at once.
func (s *Scanner) fieldName(p []byte, i int) int {
	e := &s.sse
	c := p[i]
	if e.evStart {
		if c != '\r' && c != '\n' {
			if e.skipWait > 0 {
				e.skipWait--
			} else if n := skippableEvent(p[i:]); n > 0 {
				e.afterCR = p[i+n-1] == '\r'
				e.skipBackoff = 0
				return i + n
			} else {
				e.skipBackoff = min(2*e.skipBackoff+1, 31)
				e.skipWait = e.skipBackoff
			}
		}
		e.evStart = c == '\r' || c == '\n'
	}
	if e.flen == 0 && len(p)-i >= 5 && string(p[i:i+5]) == "data:" {
		e.flen, e.phase = 4, lineDataSp
		return i + 5
	}
	switch c {
	case '\r', '\n':
		s.endLine(c)
	case ':':
		e.phase = lineSkip
		if e.flen == 4 && string(e.field[:4]) == "data" {
			e.phase = lineDataSp
		}
	default:
		if int(e.flen) < len(e.field) {
			e.field[e.flen] = c
		}
		if e.flen < 255 {
			e.flen++
		}
	}
	return i + 1
}

// lineEnd handles the line break at p[j], if p has one, and returns where
// the next line starts.
func (s *Scanner) lineEnd(p []byte, j int) int {
	if j == len(p) {
		return j
	}
	s.endLine(p[j])
	return j + 1
}

var (
	markUsage     = []byte(`"usage"`)
	markNullUsage = []byte(`"usage":null`)
	markEscape    = []byte(`\u`)
)

// skipMarkers are the quoted member names that an event must spell to hold
// a report or generated text, from the provider table: the text members
// first (the common hits), then every row's markers but "usage", which
// skippableEvent treats on its own.
var skipMarkers = func() [][]byte {
	var out [][]byte
	seen := map[string]bool{"usage": true}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, []byte(`"`+name+`"`))
		}
	}
	for _, m := range textMembers {
		add(m)
	}
	for _, p := range paths {
		for _, m := range p.markers {
			add(m)
		}
	}
	return out
}()

// skippableEvent returns the length of the complete event at the start of b
// (through its empty line) if it can hold neither a usage report nor
// generated text, else 0.
//
// Both need a member whose name is one of skipMarkers or "usage", with a
// non-null value for "usage". A member name cannot span lines (a JSON
// string holds no raw line break) and, short of a \u escape, is spelled
// literally. So an event with no \u, none of skipMarkers, and whose every
// "usage" is a literal `"usage":null` (the filler of OpenAI streams with
// include_usage) holds neither, whether or not it is valid JSON. Anything
// else is parsed in full.
func skippableEvent(b []byte) int {
	end := fastEventEnd(b)
	if end <= 0 {
		return 0
	}
	ev := b[:end]
	for _, m := range skipMarkers {
		if bytes.Contains(ev, m) {
			return 0
		}
	}
	if bytes.Contains(ev, markEscape) {
		return 0
	}
	if n := bytes.Count(ev, markUsage); n > 0 && n != bytes.Count(ev, markNullUsage) {
		return 0
	}
	return end
}

// eventEnd returns the length of the first complete event in b, through the
// empty line that ends it, or -1. b starts at the start of a line.
func eventEnd(b []byte) int {
	lineStart := true
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\n' && c != '\r' {
			lineStart = false
			continue
		}
		end := i + 1
		if c == '\r' {
			if end == len(b) {
				return -1 // the next byte may be the LF of a CRLF
			}
			if b[end] == '\n' {
				end++
			}
		}
		if lineStart {
			return end
		}
		lineStart = true
		i = end - 1
	}
	return -1
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
func (s *Scanner) beginData() {
	if s.sse.hasData {
		s.js.write([]byte{'\n'})
	}
	s.sse.hasData = true
	s.sse.phase = lineData
}

// endLine handles a line break c ('\r' or '\n').
func (s *Scanner) endLine(c byte) {
	e := &s.sse
	switch e.phase {
	case lineField:
		if e.flen == 0 {
			// An empty line dispatches the event.
			if e.hasData {
				s.usageOnly = s.js.end()
				e.hasData = false
			}
			e.evStart = true
		} else if e.flen == 4 && string(e.field[:4]) == "data" {
			s.beginData() // "data" with no colon: an empty value
		}
	case lineDataSp:
		s.beginData()
	}
	e.phase, e.flen = lineField, 0
	e.afterCR = c == '\r'
}
