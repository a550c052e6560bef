package llmrate

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/llmrate/llmrate/internal/jsonrun"
)

// MaxModelBody bounds what ModelFromBody examines of a request body: at
// most this many leading bytes are read ahead and held in memory.
const MaxModelBody = 1 << 20

// ModelFromBody returns an Extractor for WithModel that reads the model the
// way LLM APIs carry it: the top-level "model" string of a JSON request body
// (OpenAI, Anthropic, Mistral, …), else, for Gemini-style paths
// (/v1beta/models/gemini-2.5-flash:streamGenerateContent), the path segment
// after "models/" up to ":" (a segment without ":", as in OpenAI's
// /v1/models/gpt-4o, names none). It never returns an error: a request that
// names no model this way gives "".
//
// The body is read ahead, not consumed: the next handler (a
// httputil.ReverseProxy, say) still reads the whole body, byte for byte,
// with the request's Content-Length unchanged. At most the first
// MaxModelBody bytes are read ahead and examined:
//   - a body of at most MaxModelBody bytes gives its model exactly as
//     encoding/json reads it: the document must be one valid JSON object,
//     and of duplicate "model" members the last one counts; a nested
//     "model" never counts; a model that is not a string gives "";
//   - a body with a declared Content-Length above MaxModelBody gives the
//     last top-level "model" string complete within its first MaxModelBody
//     bytes (the rest is not read ahead);
//   - a chunked body (no declared length) longer than MaxModelBody gives "".
//
// A body that fails to read gives "" and the next handler sees the same
// failure after the bytes read before it.
func ModelFromBody() Extractor { return modelFromBody }

func modelFromBody(r *http.Request) (string, error) {
	if m := modelInBody(r); m != "" {
		return m, nil
	}
	if r.URL != nil {
		return modelInPath(r.URL.Path), nil
	}
	return "", nil
}

// modelInPath returns the path segment after "models/" up to ":", e.g.
// "gemini-2.5-flash" for /v1beta/models/gemini-2.5-flash:streamGenerateContent
// (Vertex AI's .../publishers/google/models/<model>:<method> too). A
// segment without ":" names no model: /v1/models/gpt-4o is OpenAI's
// retrieve-model call, not a use of the model.
func modelInPath(p string) string {
	const seg = "/models/"
	i := strings.LastIndex(p, seg)
	if i < 0 {
		return ""
	}
	m := p[i+len(seg):]
	j := strings.IndexByte(m, ':')
	if j < 0 || strings.IndexByte(m[:j], '/') >= 0 {
		return ""
	}
	return m[:j]
}

// modelInBody reads the body ahead (restoring it) and finds its model.
func modelInBody(r *http.Request) string {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return ""
	}
	declaredLarge := r.ContentLength > MaxModelBody
	want := MaxModelBody + 1 // one more byte tells a body at the bound from a larger one
	if declaredLarge {
		want = MaxModelBody
	}
	size := want
	if r.ContentLength > 0 && r.ContentLength < int64(want) {
		size = int(r.ContentLength) + 1 // room to see the end without growing
	}
	buf, err := readAhead(r.Body, make([]byte, 0, min(size, 64<<10)), want)
	replay(r, buf, err)
	switch {
	case err == io.EOF && len(buf) <= MaxModelBody:
		v, complete := scanTopModel(buf)
		if !complete {
			return ""
		}
		return modelString(v)
	case declaredLarge && err == nil:
		v, _ := scanTopModel(buf)
		return modelString(v)
	}
	return ""
}

// readAhead reads from body into buf until want bytes, the end (err is
// io.EOF) or a read error (err is that error). A nil err means want bytes
// were read and the body may go on.
func readAhead(body io.Reader, buf []byte, want int) ([]byte, error) {
	for len(buf) < want {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):min(cap(buf), want)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// replay puts the bytes read ahead back in front of what is left of the
// body; Close still closes the original body.
func replay(r *http.Request, buf []byte, err error) {
	orig := r.Body
	var rest io.Reader = orig
	switch err {
	case nil:
	case io.EOF:
		rest = nil
	default:
		rest = errReader{err}
	}
	r.Body = &replayBody{head: buf, rest: rest, Closer: orig}
}

// replayBody is a request body whose first bytes were read ahead.
type replayBody struct {
	head []byte    // read ahead, not yet replayed
	rest io.Reader // nil: the body had ended
	io.Closer
}

func (b *replayBody) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		if len(b.head) == 0 && b.rest == nil {
			return n, io.EOF
		}
		return n, nil
	}
	if b.rest == nil {
		return 0, io.EOF
	}
	return b.rest.Read(p)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// modelString decodes a model value's JSON text: a string as encoding/json
// decodes it (escapes resolved, invalid UTF-8 replaced by U+FFFD), anything
// else "".
func modelString(v []byte) string {
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	in := v[1 : len(v)-1]
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return string(in)
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// scanTopModel returns the JSON text of the value of the last top-level
// member named "model" in b, and whether b is exactly one valid JSON object
// (as encoding/json judges validity: same grammar, same nesting limit). On
// a prefix of a document (complete false) v is the last such member seen
// complete before the scan stopped. Nested members are validated and
// skipped, never matched.
func scanTopModel(b []byte) (v []byte, complete bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, skipSpace(b, i+1) == len(b)
	}
	for {
		kEnd, vStart, ok := skipMemberName(b, i)
		if !ok {
			return v, false
		}
		vEnd, ok := skipValue(b, vStart, 1)
		if !ok {
			return v, false
		}
		if isModelKey(b[i:kEnd]) {
			v = b[vStart:vEnd]
		}
		var more bool
		if i, more, ok = afterElement(b, vEnd, '}'); !ok {
			return v, false
		} else if !more {
			return v, skipSpace(b, i) == len(b)
		}
	}
}

// isModelKey reports whether a member name's JSON text decodes to "model".
func isModelKey(k []byte) bool {
	if string(k) == `"model"` {
		return true
	}
	if bytes.IndexByte(k, '\\') < 0 || len(k) > 32 {
		return false // "model" written with every letter escaped is 32 bytes
	}
	var s string
	return json.Unmarshal(k, &s) == nil && s == "model"
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value at b[i], a member or element
// of a container at depth (the top-level object is depth 1), and whether it
// is valid and complete. Nesting deeper than encoding/json's limit is
// invalid, as there.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{':
		return skipContainer(b, i, depth, '}')
	case c == '[':
		return skipContainer(b, i, depth, ']')
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	default:
		return skipNumber(b, i)
	}
}

// skipContainer returns the end of the object (end '}') or array (end ']')
// opening at b[i], a member or element of a container at depth, and whether
// it is valid and complete.
func skipContainer(b []byte, i, depth int, end byte) (int, bool) {
	if depth++; depth > maxModelDepth {
		return i, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == end {
		return i + 1, true
	}
	for {
		var ok, more bool
		if end == '}' {
			if _, i, ok = skipMemberName(b, i); !ok {
				return i, false
			}
		}
		if i, ok = skipValue(b, i, depth); !ok {
			return i, false
		}
		if i, more, ok = afterElement(b, i, end); !ok || !more {
			return i, ok
		}
	}
}

// afterElement skips what follows a member or element of a container
// closed by end, from b[i]: a comma (more: the next one starts at next) or
// end itself (next is just past it). ok is false when neither follows.
func afterElement(b []byte, i int, end byte) (next int, more, ok bool) {
	i = skipSpace(b, i)
	if i >= len(b) {
		return i, false, false
	}
	switch b[i] {
	case ',':
		return skipSpace(b, i+1), true, true
	case end:
		return i + 1, false, true
	}
	return i, false, false
}

// skipMemberName skips the object member's name at b[i], its colon and the
// space around it: the name ends at nameEnd, the value starts at value.
func skipMemberName(b []byte, i int) (nameEnd, value int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return i, i, false
	}
	if nameEnd, ok = skipString(b, i); !ok {
		return nameEnd, nameEnd, false
	}
	i = skipSpace(b, nameEnd)
	if i >= len(b) || b[i] != ':' {
		return nameEnd, i, false
	}
	return nameEnd, skipSpace(b, i+1), true
}

// maxModelDepth is encoding/json's nesting limit: a document nested deeper
// is invalid there, hence here.
const maxModelDepth = 10000

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// skipNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. A
// number that reaches the end of b is incomplete (more digits may follow).
func skipNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, i < len(b)
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// skipString returns the end of the string whose opening quote is b[i],
// and whether it is valid (no control bytes, only JSON's escapes) and
// complete. Bytes are not checked as UTF-8: encoding/json accepts invalid
// UTF-8 and replaces it when decoding.
func skipString(b []byte, i int) (int, bool) {
	i++
	for {
		i += jsonrun.Plain(b[i:])
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		default: // a control byte
			return i, false
		}
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
