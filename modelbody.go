package llmrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/llmrate/llmrate/internal/jsonrun"
	"github.com/llmrate/llmrate/internal/readahead"
)

// MaxModelBody bounds what ModelFromBody examines of a request body: at
// most this many leading bytes are read ahead and held in memory, and only
// until the next handler has read them (or closed the body): a long
// response after a large request holds none of them.
const MaxModelBody = 1 << 20

// ModelFromBody returns an Extractor for WithModel that reads the model the
// way LLM APIs carry it: the top-level "model" string of a JSON request body
// (OpenAI, Anthropic, Mistral, …), else, for Gemini-style paths
// (/v1beta/models/gemini-2.5-flash:streamGenerateContent), the path segment
// after "models/" up to ":" (a segment without ":", as in OpenAI's
// /v1/models/gpt-4o, names none). A request that names no model this way
// gives "", nil.
//
// Member names match as a Go upstream decoding the body into a struct
// matches them: case-insensitively, so {"Model":"gpt-4o"} names gpt-4o. A
// body whose top-level members name the model more than once with
// different values (names compared case-insensitively, values exactly:
// strings as decoded, anything else as written; exact-case duplicates
// included, since parsers differ on whether the first or the last wins) is
// ambiguous: ModelFromBody returns ErrAmbiguousModel, which the middleware
// answers 400 "invalid_model". Repeats of one value, in any case, name that
// model.
//
// The body is read ahead, not consumed: the next handler (a
// httputil.ReverseProxy, say) still reads the whole body, byte for byte,
// with the request's Content-Length unchanged. At most the first
// MaxModelBody bytes are read ahead and examined, once per request however
// many of ModelFromBody and EstimateFromBody read them:
//   - a body of at most MaxModelBody bytes gives its model exactly as
//     encoding/json reads it: the document must be one valid JSON object; a
//     nested "model" never counts; a model that is not a string gives "";
//   - a body with a declared Content-Length above MaxModelBody gives the
//     top-level "model" string complete within its first MaxModelBody bytes
//     (the rest is not read ahead), ambiguous as above among those;
//   - a chunked body (no declared length) longer than MaxModelBody gives "".
//
// A body that fails to read gives "" and the next handler sees the same
// failure after the bytes read before it.
//
// A body sent with a Content-Encoding the response side decodes (gzip,
// x-gzip, deflate, br, zstd) is read as its decoded bytes, by the same
// bounded decoders: the first MaxModelBody decoded bytes, as a chunked body
// (so one decoding to more names no model, and a decompression bomb is
// stopped there), with at most MaxModelBody encoded bytes held for the next
// handler, which still reads every original byte. A coding that cannot be
// decoded (another coding, a chain, a corrupt or truncated stream) gives
// what a body that is not JSON gives: the path's model, or "".
func ModelFromBody() Extractor { return modelFromBody }

// ErrAmbiguousModel is returned by ModelFromBody for a body whose top-level
// members name the model more than once with different values (see
// ModelFromBody). The middleware answers it 400 with code "invalid_model".
var ErrAmbiguousModel = errors.New("llmrate: the request names its model more than once, with different values")

func modelFromBody(r *http.Request) (string, error) {
	m, err := modelInBody(r)
	if err != nil || m != "" {
		return m, err
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
func modelInBody(r *http.Request) (string, error) {
	rb := readAheadBody(r)
	if rb == nil {
		return "", nil
	}
	f := rb.facts(false)
	switch {
	case rb.whole() && !f.complete, !rb.whole() && !rb.prefix():
		return "", nil
	case f.ambiguous:
		return "", ErrAmbiguousModel
	}
	return modelString(f.model), nil
}

// readAheadBody returns r's body read ahead: the one an earlier reader of
// this request (ModelFromBody, EstimateFromBody) left, when nothing has been
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
	declaredLarge := r.ContentLength > MaxModelBody
	size := MaxModelBody
	if r.ContentLength > 0 && r.ContentLength < MaxModelBody {
		size = int(r.ContentLength) + 1 // room to see the end without growing
	}
	// At most MaxModelBody bytes are held; one more byte, read on its own,
	// tells a body at the bound from a larger one.
	buf, err := readahead.Read(r.Body, make([]byte, 0, min(size, 64<<10)), MaxModelBody)
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
	end           error  // how the read-ahead stopped: nil (MaxModelBody bytes read and more follow), io.EOF or the read error
	declaredLarge bool   // a declared Content-Length above MaxModelBody
	started       bool   // the replay began (or the body was closed): the facts are no longer read
	scanned       int8   // 0: not scanned; 1: for the model; 2: for the estimate too
	f             bodyFacts
}

// whole reports whether ahead is the whole body, within MaxModelBody.
func (b *replayBody) whole() bool { return b.end == io.EOF && len(b.ahead) <= MaxModelBody }

// prefix reports whether ahead is the first MaxModelBody bytes of a larger
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

// sameModel reports whether two model values (valid JSON texts) are the
// same value: strings as decoded, anything else as written.
func sameModel(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if a[0] != '"' || b[0] != '"' {
		return false
	}
	return modelString(a) == modelString(b)
}

// bodyFacts is what one scan of a request body's first bytes found.
type bodyFacts struct {
	// model is the JSON text of the last top-level member named "model"
	// (case-insensitively) seen complete; nil: none.
	model []byte
	// ambiguous: two such members have different values.
	ambiguous bool
	// complete: the bytes are exactly one valid JSON object (as
	// encoding/json judges validity: same grammar, same nesting limit).
	complete bool
	// For the estimate (estimate.go), per top-level member, the last one's:
	text [numTextMembers]int64 // decoded UTF-8 bytes of prompt text
	out  [numOutMembers]int64  // output limit; -1: absent or not a valid non-negative integer
}

func (f *bodyFacts) noteModel(v []byte) {
	if f.model != nil && !sameModel(f.model, v) {
		f.ambiguous = true
	}
	f.model = v
}

// scanBody scans b, a JSON request body or its first bytes: its top-level
// model members, its validity and, when estimate is set, the members
// EstimateFromBody counts. On a prefix of a document (complete false) the
// facts are those of the members seen complete before the scan stopped.
// Nested members are validated and skipped, never matched as the model.
func scanBody(b []byte, estimate bool) (f bodyFacts) {
	for k := range f.out {
		f.out[k] = -1
	}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return f
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		f.complete = skipSpace(b, i+1) == len(b)
		return f
	}
	for {
		kEnd, vStart, ok := skipMemberName(b, i)
		if !ok {
			return f
		}
		var vEnd int
		switch k := b[i:kEnd]; {
		case isModelKey(k):
			if vEnd, ok = skipValue(b, vStart, 1); ok {
				f.noteModel(b[vStart:vEnd])
			}
		case estimate:
			vEnd, ok = f.estimateMember(b, k, vStart)
		default:
			vEnd, ok = skipValue(b, vStart, 1)
		}
		if !ok {
			return f
		}
		var more bool
		if i, more, ok = afterElement(b, vEnd, '}'); !ok {
			return f
		} else if !more {
			f.complete = skipSpace(b, i) == len(b)
			return f
		}
	}
}

// isModelKey reports whether a member name's JSON text decodes to "model"
// in any case (no other rune folds to one of its letters).
func isModelKey(k []byte) bool { return nameIs(k, "model", true) }

// nameIs reports whether the JSON string k (quotes included, valid)
// decodes to want, an ASCII lower-case name when fold is set (then k
// matches in any ASCII case). It never allocates.
func nameIs(k []byte, want string, fold bool) bool {
	s := k[1 : len(k)-1]
	if len(s) == len(want) && bytes.IndexByte(s, '\\') < 0 {
		if !fold {
			return string(s) == want
		}
		for i := range len(s) {
			if c := s[i] | 0x20; c != want[i] || c < 'a' || c > 'z' {
				return false
			}
		}
		return true
	}
	if len(s) > 6*len(want) || bytes.IndexByte(s, '\\') < 0 {
		return false // six bytes at most per escaped letter
	}
	j := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' {
			r, n := unescape(s[i:])
			if r >= utf8.RuneSelf {
				return false
			}
			c, i = byte(r), i+n
		} else {
			i++
		}
		if fold && c >= 'A' && c <= 'Z' {
			c |= 0x20
		}
		if j >= len(want) || c != want[j] {
			return false
		}
		j++
	}
	return j == len(want)
}

// unescape decodes the escape at the start of s (a valid JSON string's
// content, s[0] a backslash) as encoding/json does: a surrogate pair is one
// rune, a lone surrogate U+FFFD. n is the escape's length.
func unescape(s []byte) (r rune, n int) {
	switch s[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
	default: // '"', '\\', '/'
		return rune(s[1]), 2
	}
	r = hex4(s[2:6])
	if !utf16.IsSurrogate(r) {
		return r, 6
	}
	if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
		if d := utf16.DecodeRune(r, hex4(s[8:12])); d != utf8.RuneError {
			return d, 12
		}
	}
	return utf8.RuneError, 6
}

// hex4 decodes four hex digits (valid: the string was validated, or a
// surrogate's partner that is not hex gives a value DecodeRune refuses).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
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
