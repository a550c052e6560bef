package request

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/llmrate/llmrate/internal/jsonrun"
)

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
// Estimate counts. On a prefix of a document (complete false) the
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
	if depth++; depth > maxDepth {
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

// maxDepth is encoding/json's nesting limit: a document nested deeper
// is invalid there, hence here.
const maxDepth = 10000

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
