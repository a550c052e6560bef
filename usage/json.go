package usage

import (
	"encoding/binary"
	"math/bits"

	"github.com/llmrate/llmrate/internal/jsonrun"
)

// jsonScan is an incremental (push) JSON parser that validates one document
// at a time, byte by byte, across any write boundaries, in constant memory.
// It records the values at the rows of paths and counts the generated text
// of textMembers; everything else (tool arguments, nested look-alikes) is
// validated and skipped, never interpreted. A document counts only once it
// is complete and valid (applyDoc).

// maxJSONDepth matches encoding/json's nesting limit, so a document is valid
// here exactly when encoding/json accepts it.
const maxJSONDepth = 10000

// nodeKind is what an object at a tracked depth is.
type nodeKind uint8

const (
	nkOther         nodeKind = iota
	nkRoot                   // the document's top-level object (slotRoot's report too)
	nkContainer              // D.member of a row whose report is in a sub member
	nkReport                 // a report object
	nkTokens                 // a report's tokens object (Cohere)
	nkBilled                 // a report's billed_units object (Cohere)
	nkPromptDetails          // a report's prompt_tokens_details object
	nkComplDetails           // a report's completion_tokens_details object
	nkInDetails              // a report's input_tokens_details object
	nkOutDetails             // a report's output_tokens_details object
	nkIteration              // an element of a report's iterations array
	nkPrediction             // an element of D.predictions
	nkEmbeddings             // a prediction's embeddings object
	nkStatistics             // embeddings.statistics
	nkIterations             // a report's iterations array (pending only)
	nkPredictions            // D.predictions (pending only)
)

// node is a tracked object: its kind and the row it belongs to.
type node uint8

func mkNode(k nodeKind, s slot) node { return node(k)<<4 | node(s) }
func (n node) kind() nodeKind        { return nodeKind(n >> 4) }
func (n node) slot() slot            { return slot(n & 15) }

const rootNode = node(nkRoot)<<4 | node(slotRoot)

// pending is what the value about to be parsed means.
type pending uint8

const (
	pNone      pending = iota
	pNode              // if an object, it is node pNode
	pField             // counted field pField of row pSlot
	pType              // D.type
	pDone              // D.done
	pChoices           // D.choices (to tell OpenAI's usage-only chunk)
	pEventType         // D.event_type
	pElemType          // the type of an iteration
)

// capture is where a string's decoded bytes are copied.
type capture uint8

const (
	capNone      capture = iota
	capKey               // a member name
	capType              // D.type: docState.str[strType]
	capEventType         // D.event_type: docState.str[strEventType]
	capElemType          // an iteration's type: docState.str[strElemType]
)

// The captured strings of a document, docState.str[capture - capType].
const (
	strType = iota
	strEventType
	strElemType
)

// parseState is the parser's position in the JSON grammar.
type parseState uint8

const (
	sValue      parseState = iota // a value is expected
	sArrFirst                     // after '[': a value or ']'
	sObjFirst                     // after '{': a key or '}'
	sObjKey                       // after ',' in an object: a key
	sColon                        // after a key
	sAfterValue                   // after a value inside a container: ',' or close
	sEnd                          // after the top-level value: whitespace only
	sStr                          // inside a string
	sStrEsc                       // after a backslash
	sStrU                         // inside \uXXXX
	sNum                          // inside a number
	sLit                          // inside true/false/null
	sBad                          // the document is invalid; ignore the rest
)

// numPhase is the position in the JSON number grammar.
type numPhase uint8

const (
	nMinus numPhase = iota // after '-'
	nZero                  // a leading 0
	nInt                   // integer digits
	nDot                   // after '.'
	nFrac                  // fraction digits
	nE                     // after 'e'/'E'
	nESign                 // after the exponent sign
	nExp                   // exponent digits
)

// shortString is a captured string value, kept up to 24 bytes.
type shortString struct {
	b    [24]byte
	n    uint8
	over bool // longer than b
	ok   bool // the value is a string
}

func (t *shortString) add(s []byte) {
	c := copy(t.b[t.n:], s)
	t.n += uint8(c)
	t.over = t.over || c < len(s)
}

// is reports whether the value is the string s.
func (t *shortString) is(s string) bool { return t.ok && !t.over && string(t.b[:t.n]) == s }

// hasPrefix reports whether the value is a string starting with s.
func (t *shortString) hasPrefix(s string) bool {
	return t.ok && int(t.n) >= len(s) && string(t.b[:len(s)]) == s
}

// docState is what one document says at the rows of paths.
type docState struct {
	slots        [numSlots]report
	dirty        uint16         // slots a member named: to apply, then clear on reset
	rootObj      bool           // the document is an object
	str          [3]shortString // D.type, D.event_type, the current iteration's type
	done         bool
	gen          int64 // generated text bytes
	choicesAt    int32 // depth of the open D.choices array, 0 when none
	choicesEmpty bool  // D.choices is []
}

func (d *docState) reset() {
	for m := d.dirty; m != 0; m &= m - 1 {
		d.slots[bits.TrailingZeros16(m)].reportState = reportState{}
	}
	d.dirty = 0
	d.str[strType].n, d.str[strType].over, d.str[strType].ok = 0, false, false
	d.str[strEventType].n, d.str[strEventType].over, d.str[strEventType].ok = 0, false, false
	d.done, d.rootObj = false, false
	d.gen, d.choicesAt, d.choicesEmpty = 0, 0, false
}

func (d *docState) clearSlot(s slot) {
	if d.dirty&(1<<s) != 0 {
		d.slots[s].reportState = reportState{}
	}
	d.dirty |= 1 << s
}

type jsonScan struct {
	state parseState
	// arrayDocs: the body's top-level value is an array whose elements are
	// each a document (Gemini streamGenerateContent without alt=sse).
	allowArrayDocs bool
	arrayDocs      bool
	depth          int32
	isArr          [maxJSONDepth/8 + 1]uint8 // bit per depth: container is an array
	arr            bool                      // the container at depth is an array (isArr's bit, kept at hand)
	nodes          [8]node                   // node of the object at depth 1..7
	// elemAt: the depth of the array whose elements are elemNode objects
	// (a report's iterations, D.predictions), 0 when none is open;
	// elemObjAt: the depth of the element object being read, 0 when none.
	elemAt, elemObjAt int32
	elemNode          node

	// the value about to be parsed
	pend   pending
	pNode  node
	pField field
	pSlot  slot
	text   bool // it is a text member's value

	// strings
	strCap   capture
	isKey    bool
	counting bool // the string is generated text: its bytes are counted
	hi       bool // the last bytes counted were a high surrogate's \u escape
	key      [maxMemberLen]byte
	keyLen   uint8
	keyOver  bool
	uhex     uint8
	ucp      uint16

	// numbers
	numPhase numPhase
	numPlain bool // digits only so far
	numOver  bool
	num      int64

	// literals
	lit    string
	litPos uint8

	doc docState
	acc *accumulator
	// clean: nothing was written since resetDoc, so init need not
	// reset again (Finish's end reset the document just before Reset).
	clean bool
}

func (p *jsonScan) init(acc *accumulator, allowArrayDocs bool) {
	p.acc = acc
	p.allowArrayDocs = allowArrayDocs
	if !p.clean {
		p.resetDoc()
	}
}

// resetDoc prepares for a new document.
func (p *jsonScan) resetDoc() {
	p.state = sValue
	p.depth, p.arr = 0, false
	p.arrayDocs = false
	p.pend, p.text, p.counting = pNone, false, false
	p.elemAt, p.elemObjAt = 0, 0
	p.doc.reset()
	p.clean = true
}

// node returns the tracked node of the object at the current depth.
func (p *jsonScan) node() node {
	if p.depth >= 1 && int(p.depth) < len(p.nodes) && !p.inArray() {
		return p.nodes[p.depth]
	}
	return node(nkOther)
}

func (p *jsonScan) inArray() bool { return p.arr }

// popContainer leaves the innermost container for its parent.
func (p *jsonScan) popContainer() {
	p.depth--
	p.arr = p.isArr[p.depth>>3]&(1<<(p.depth&7)) != 0
}

// end finishes the current document at end of input, applies it if it is
// complete and valid, and reports whether it was an OpenAI usage-only chunk
// (an object with "choices": [] and a usage object).
func (p *jsonScan) end() (usageOnly bool) {
	valid := p.state == sEnd || p.state == sNum && p.depth == 0 && p.numTerminal() // a bare number carries nothing either way
	if valid && !p.arrayDocs {
		p.acc.applyDoc(&p.doc)
		usageOnly = p.doc.choicesEmpty && p.doc.slots[slotUsage].obj && p.doc.rootObj
	}
	p.resetDoc()
	return usageOnly
}

func (p *jsonScan) numTerminal() bool {
	switch p.numPhase {
	case nZero, nInt, nFrac, nExp:
		return true
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// skipSpace returns the index of the first non-whitespace byte of b at or
// after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// write feeds document bytes. Each state is a method that consumes what it
// can from b[i:] (its own fast path included) and returns where it stopped.
func (p *jsonScan) write(b []byte) {
	p.clean = false
	for i := 0; i < len(b); {
		switch p.state {
		case sStr:
			i = p.inString(b, i)
		case sStrEsc:
			i = p.inEscape(b, i)
		case sStrU:
			i = p.inUnicode(b, i)
		case sNum:
			i = p.inNumber(b, i)
		case sLit:
			i = p.inLiteral(b, i)
		case sValue, sArrFirst:
			i = p.atValue(b, i)
		case sObjFirst, sObjKey:
			i = p.atKey(b, i)
		case sColon:
			i = p.atColon(b, i)
		case sAfterValue:
			i = p.afterValue(b, i)
		case sEnd:
			i = p.atEnd(b, i)
		default: // sBad
			return
		}
	}
}

// inString reads string bytes, the plain ones eight at a time, counting
// them when the string is generated text and capturing them when it is
// D.type or a member name split across writes. Its fast path runs on
// through an object's strings (name, ':', string value, ',', next name…)
// without returning to the dispatcher.
func (p *jsonScan) inString(b []byte, i int) int {
	for i < len(b) {
		if p.isKey && p.keyLen == 0 && !p.keyOver {
			// a member name from its first byte: members, while the
			// object's members lie whole in b
			if i = p.members(b, i); p.state != sStr {
				return i
			}
		}
		if i = p.stringPart(b, i); p.state != sStr {
			return i
		}
	}
	return i
}

// plainEnd returns the index of the first byte of b at or after i that is
// not plain string content (jsonrun.Plain, its first two words tested
// here: most member names and many values end within them), or len(b).
func plainEnd(b []byte, i int) int {
	for j := i; j+8 <= len(b); j += 8 {
		if m := jsonrun.Stops(binary.LittleEndian.Uint64(b[j : j+8])); m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
		if j-i == 24 {
			return j + 8 + jsonrun.Plain(b[j+8:])
		}
	}
	return i + jsonrun.Plain(b[i:])
}

// members reads an object's members from b[i], the first byte of a member
// name (beginKey's state), for as long as each lies whole in b in the
// usual shape: a name without escapes, ':' at once, then a value that is a
// plain string, a plain integer, a literal, or a container whose first
// member follows at once; members then follow one another after ',', and
// an object's close goes through afterValue. The state is kept in
// registers until it returns; where the shape ends it sets the state the
// general path (stringPart, the dispatcher) goes on from.
func (p *jsonScan) members(b []byte, i int) int {
	for {
		// the name: its first word tested here (most names end within
		// it), its nameWord that word masked
		var j int
		var w uint64
		if i+8 > len(b) {
			return i
		}
		w = binary.LittleEndian.Uint64(b[i : i+8])
		if m := jsonrun.Stops(w); m != 0 {
			n := bits.TrailingZeros64(m) / 8
			j, w = i+n, w&wordMasks[n]
		} else {
			j = plainEnd(b, i+8)
		}
		if j+2 >= len(b) || b[j] != '"' {
			return i // the name unread: stringPart reads it
		}
		name := b[i:j]
		p.strCap, p.isKey = capNone, false
		p.pend, p.text = pNone, false
		if h := memberHash(w, len(name)); memberIndex[h] != 0 {
			p.onKey(h, name, w)
		}
		if b[j+1] != ':' {
			p.state = sColon
			return j + 1
		}
		i = j + 2
		switch c := b[i]; {
		case c == '"' && p.pend == pNone:
			i++
			if i+8 > len(b) {
				j = plainEnd(b, i)
			} else if m := jsonrun.Stops(binary.LittleEndian.Uint64(b[i : i+8])); m != 0 {
				j = i + bits.TrailingZeros64(m)/8
			} else {
				j = plainEnd(b, i+8)
			}
			if j == len(b) || b[j] != '"' {
				p.state, p.counting, p.hi, p.text = sStr, p.text, false, false
				return i
			}
			if p.text {
				p.doc.gen += int64(j - i)
				p.text = false
			}
			p.valueDone()
			i = j + 1
		case isDigit(c):
			j = i + 1
			if c != '0' {
				for j < len(b) && isDigit(b[j]) {
					j++
				}
			}
			if j == len(b) || j-i > 18 || (b[j] != ',' && b[j] != '}' && b[j] != ']') {
				p.beginValue(c)
				return p.inNumber(b, i+1)
			}
			p.text = false
			if p.pend == pField {
				var v int64
				for _, d := range b[i:j] {
					v = v*10 + int64(d-'0')
				}
				p.setField(stOK, v)
			}
			p.valueDone()
			i = j
		case c == 'n' || c == 't' || c == 'f':
			lit := ""
			if len(b)-i >= 5 {
				switch w := binary.LittleEndian.Uint32(b[i:]); {
				case w == 'n'|'u'<<8|'l'<<16|'l'<<24:
					lit = "null"
				case w == 't'|'r'<<8|'u'<<16|'e'<<24:
					lit = "true"
				case w == 'f'|'a'<<8|'l'<<16|'s'<<24 && b[i+4] == 'e':
					lit = "false"
				}
			}
			if lit == "" {
				p.beginValue(c)
				return p.inLiteral(b, i+1)
			}
			p.text, p.lit = false, lit
			p.endLiteral()
			i += len(lit)
		case c == '{' || c == '[':
			p.beginValue(c)
			if i++; p.state == sObjFirst && i < len(b) && b[i] == '"' {
				p.beginKey()
				i++
				continue
			}
			return p.afterOpen(b, i)
		default:
			p.state = sValue
			return i
		}
		// after a scalar member value, at b[i]
		if i+1 < len(b) && b[i] == ',' && b[i+1] == '"' && p.state == sAfterValue {
			p.beginKey()
			i += 2
			continue
		}
		if i = p.afterValue(b, i); p.state != sStr || !p.isKey {
			return i
		}
	}
}

// stringPart reads one string from b[i] (or the part of it in b), the
// general path: escapes, captured strings, a name or value cut by the end
// of b. After a value string it goes on through afterValue as far as the
// next member name's first byte.
func (p *jsonScan) stringPart(b []byte, i int) int {
	for {
		// plainEnd, its first two words tested here: the runs between a
		// long string's escapes are often short.
		var j int
		if len(b)-i >= 16 {
			if m := jsonrun.Stops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				j = i + bits.TrailingZeros64(m)/8
			} else if m := jsonrun.Stops(binary.LittleEndian.Uint64(b[i+8:])); m != 0 {
				j = i + 8 + bits.TrailingZeros64(m)/8
			} else {
				j = plainEnd(b, i+16)
			}
		} else {
			j = plainEnd(b, i)
		}
		if p.counting && j > i {
			p.doc.gen += int64(j - i)
			p.hi = false
		}
		if j == len(b) || b[j] != '"' {
			if j+1 < len(b) && b[j] == '\\' && p.strCap == capNone && b[j+1] != 'u' {
				// A one-byte escape inside a counted or skipped string.
				p.state = sStrEsc
				if i = p.inEscape(b, j+1); p.state == sStr {
					continue
				}
				return i
			}
			return p.notQuote(b, i, j)
		}
		if p.isKey {
			name := b[i:j] // the whole name is in b: look it up where it lies
			w := nameWord(b[i:], j-i)
			if p.keyLen > 0 || p.keyOver {
				name, w = p.splitName(name)
			}
			// The name ends. lookupMember's first probe is made here:
			// most names are in no table, and need neither call.
			p.strCap, p.isKey = capNone, false
			p.state, p.pend, p.text = sColon, pNone, false
			if h := memberHash(w, len(name)); memberIndex[h] != 0 {
				p.onKey(h, name, w)
			}
			i = p.afterQuote(b, j+1)
		} else {
			if p.strCap != capNone {
				p.capture(b[i:j])
			}
			p.strCap, p.counting = capNone, false
			p.valueDone()
			i = p.nextKey(b, j+1)
		}
		if p.state != sStr || p.isKey && p.keyLen == 0 {
			return i
		}
	}
}

// notQuote handles a string's plain run b[i:j] that neither a quote nor a
// one-byte escape in a string not captured ended: the end of b, a captured
// string's backslash, a \u escape, or a control byte.
func (p *jsonScan) notQuote(b []byte, i, j int) int {
	if p.strCap != capNone {
		p.capture(b[i:j])
	}
	return p.stringStop(b, j)
}

// splitName completes a member name begun in an earlier write with its
// last part, and returns it (nil when longer than any name looked for)
// and its nameWord.
func (p *jsonScan) splitName(last []byte) ([]byte, uint64) {
	p.capture(last)
	name := p.key[:p.keyLen]
	w := nameWord(p.key[:], len(name))
	if p.keyOver {
		name = nil // longer than any name we look for
	}
	return name, w
}

// stringStop handles what stopped a string's plain run at b[j], if any: a
// backslash, or a control byte (invalid).
func (p *jsonScan) stringStop(b []byte, j int) int {
	if j == len(b) {
		return j
	}
	p.state = sBad
	if b[j] == '\\' {
		p.state = sStrEsc
	}
	return j + 1
}

// nextKey is the fast path from a value to the next member's name: ','
// and its opening quote at once; anything else after the value goes to
// afterValue at once rather than through the dispatcher. It inlines.
func (p *jsonScan) nextKey(b []byte, i int) int {
	if p.state != sAfterValue || i+1 >= len(b) {
		return i
	}
	if b[i] == ',' && b[i+1] == '"' && !p.arr {
		p.beginKey()
		return i + 2
	}
	return p.afterValue(b, i)
}

// afterQuote is inString's second fast path: a member name is usually
// followed at once by ':' and the value's first byte.
func (p *jsonScan) afterQuote(b []byte, i int) int {
	if p.state != sColon || i+1 >= len(b) || b[i] != ':' {
		return i
	}
	p.state = sValue
	c := b[i+1]
	if c == '"' && p.pend == pNone {
		// beginValue's string case for a member that means nothing to
		// the rows (most of them): nothing to capture or record.
		p.state, p.isKey, p.strCap = sStr, false, capNone
		p.counting, p.hi, p.text = p.text, false, false
		return i + 2
	}
	if c == '{' || c == '[' {
		p.beginValue(c)
		return p.afterOpen(b, i+2)
	}
	if c == '"' {
		p.beginValue(c)
		return i + 2
	}
	if isDigit(c) {
		return p.memberNumber(b, i+1)
	}
	if c == 'n' || c == 't' || c == 'f' {
		return p.memberLiteral(b, i+1)
	}
	if c == '-' {
		p.beginValue(c)
		return p.inNumber(b, i+2)
	}
	return i + 1
}

// memberNumber reads a member's number value starting at b[i]. A plain
// integer of at most 18 digits ended within b by ',', '}' or ']' (nearly
// every number a response carries) is taken in one loop with its value
// kept in a register; anything else (a fraction, an exponent, a leading
// zero followed by a digit, a number cut by the end of b) goes through
// beginValue and inNumber, which validate it byte by byte.
func (p *jsonScan) memberNumber(b []byte, i int) int {
	j := i + 1
	if b[i] != '0' {
		for j < len(b) && isDigit(b[j]) {
			j++
		}
	}
	if j >= len(b) || j-i > 18 || (b[j] != ',' && b[j] != '}' && b[j] != ']') {
		p.beginValue(b[i])
		return p.inNumber(b, i+1)
	}
	p.text = false
	if p.pend == pField {
		var v int64
		for _, c := range b[i:j] {
			v = v*10 + int64(c-'0')
		}
		p.setField(stOK, v)
	}
	p.valueDone()
	return p.nextKey(b, j)
}

// memberLiteral reads a member's true, false or null value starting at
// b[i]: compared as one word when b holds it whole, else byte by byte
// (beginValue, inLiteral).
func (p *jsonScan) memberLiteral(b []byte, i int) int {
	if len(b)-i >= 5 {
		var lit string
		switch w := binary.LittleEndian.Uint32(b[i:]); {
		case w == 'n'|'u'<<8|'l'<<16|'l'<<24:
			lit = "null"
		case w == 't'|'r'<<8|'u'<<16|'e'<<24:
			lit = "true"
		case w == 'f'|'a'<<8|'l'<<16|'s'<<24 && b[i+4] == 'e':
			lit = "false"
		}
		if lit != "" {
			p.text, p.lit = false, lit
			p.endLiteral()
			return p.nextKey(b, i+len(lit))
		}
	}
	p.beginValue(b[i])
	return p.inLiteral(b, i+1)
}

// afterOpen is the fast path past an opening bracket: a member name's
// quote, or an array's first element opening another container, is taken
// at once rather than through the dispatcher (atKey, atValue).
func (p *jsonScan) afterOpen(b []byte, i int) int {
	for i < len(b) {
		switch c := b[i]; {
		case c == '"' && p.state == sObjFirst:
			p.beginKey()
			return i + 1
		case (c == '{' || c == '[') && p.state == sArrFirst:
			p.beginValue(c)
			i++
		default:
			return i
		}
	}
	return i
}

// inEscape reads the byte after a backslash.
func (p *jsonScan) inEscape(b []byte, i int) int {
	var r byte
	switch c := b[i]; c {
	case '"', '\\', '/':
		r = c
	case 'b':
		r = '\b'
	case 'f':
		r = '\f'
	case 'n':
		r = '\n'
	case 'r':
		r = '\r'
	case 't':
		r = '\t'
	case 'u':
		p.state, p.uhex, p.ucp = sStrU, 0, 0
		return i + 1
	default:
		p.state = sBad
		return i + 1
	}
	p.state = sStr
	if p.counting {
		p.doc.gen++
		p.hi = false
	}
	if p.strCap != capNone {
		p.capture([]byte{r})
	}
	return i + 1
}

// inUnicode reads a hex digit of \uXXXX.
func (p *jsonScan) inUnicode(b []byte, i int) int {
	c := b[i]
	var h byte
	switch {
	case isDigit(c):
		h = c - '0'
	case c >= 'a' && c <= 'f':
		h = c - 'a' + 10
	case c >= 'A' && c <= 'F':
		h = c - 'A' + 10
	default:
		p.state = sBad
		return i + 1
	}
	p.ucp = p.ucp<<4 | uint16(h)
	if p.uhex++; p.uhex < 4 {
		return i + 1
	}
	p.state = sStr
	if p.counting {
		p.countEscape(p.ucp)
	}
	if p.strCap != capNone {
		r := byte(0xFF) // non-ASCII: never matches a name we look for
		if p.ucp < 0x80 {
			r = byte(p.ucp)
		}
		p.capture([]byte{r})
	}
	return i + 1
}

// countEscape counts the UTF-8 bytes a \u escape decodes to, as
// encoding/json decodes it: a high surrogate escape followed at once by a
// low one is one 4-byte rune; any other surrogate becomes U+FFFD (3 bytes).
func (p *jsonScan) countEscape(cp uint16) {
	hi := false
	switch {
	case cp < 0x80:
		p.doc.gen++
	case cp < 0x800:
		p.doc.gen += 2
	case cp >= 0xDC00 && cp < 0xE000 && p.hi:
		p.doc.gen++ // completes a pair counted 3 at its high half
	default:
		p.doc.gen += 3
		hi = cp >= 0xD800 && cp < 0xDC00
	}
	p.hi = hi
}

// inNumber reads number bytes; the byte that ends a number is left for the
// next state. It reads on to the number's end within b, so a number costs
// one dispatch, not one a byte.
func (p *jsonScan) inNumber(b []byte, i int) int {
	for {
		switch {
		case p.numPhase == nInt && p.numPlain:
			// A counted field's integer digits, its value kept.
			for ; i < len(b) && isDigit(b[i]); i++ {
				p.addDigit(b[i])
			}
		case p.numPhase == nInt || p.numPhase == nFrac || p.numPhase == nExp:
			// Digits whose value is not needed.
			for i < len(b) && isDigit(b[i]) {
				i++
			}
		}
		if i == len(b) {
			return i
		}
		if c := b[i]; c == ',' || c == '}' || c == ']' || !p.numByte(c) {
			break // the usual ends first: no phase takes them
		}
		i++
	}
	if !p.numTerminal() {
		p.state = sBad
		return i + 1
	}
	p.endNumber()
	return p.nextKey(b, i)
}

// inLiteral reads the rest of true, false or null, as far as b goes.
func (p *jsonScan) inLiteral(b []byte, i int) int {
	for ; i < len(b); i++ {
		if b[i] != p.lit[p.litPos] {
			p.state = sBad
			return i + 1
		}
		if p.litPos++; int(p.litPos) == len(p.lit) {
			p.endLiteral()
			return p.nextKey(b, i+1)
		}
	}
	return i
}

// atValue expects a value (or, first in an array, its end).
func (p *jsonScan) atValue(b []byte, i int) int {
	if i = skipSpace(b, i); i == len(b) {
		return i
	}
	c := b[i]
	if c == ']' && p.state == sArrFirst {
		if p.depth == p.doc.choicesAt {
			p.doc.choicesEmpty = true
		}
		p.closeContainer()
		return i + 1
	}
	p.beginValue(c)
	return i + 1
}

// atKey expects a member name (or, first in an object, its end).
func (p *jsonScan) atKey(b []byte, i int) int {
	if i = skipSpace(b, i); i == len(b) {
		return i
	}
	switch c := b[i]; {
	case c == '"':
		p.beginKey()
	case c == '}' && p.state == sObjFirst:
		p.closeContainer()
	default:
		p.state = sBad
	}
	return i + 1
}

func (p *jsonScan) atColon(b []byte, i int) int {
	if i = skipSpace(b, i); i == len(b) {
		return i
	}
	p.state = sValue
	if b[i] != ':' {
		p.state = sBad
	}
	return i + 1
}

// afterValue expects ',' or the container's end; its fast path starts the
// next member name at once.
func (p *jsonScan) afterValue(b []byte, i int) int {
again:
	if i = skipSpace(b, i); i == len(b) {
		return i
	}
	arr := p.inArray()
	switch c := b[i]; {
	case c == ',' && arr:
		p.state, p.pend = sValue, pNone
		if p.depth == p.elemAt {
			p.pend, p.pNode = pNode, p.elemNode
		}
		if p.arrayDocs && p.depth == 1 {
			p.pend, p.pNode = pNode, rootNode
		}
	case c == ',':
		p.state = sObjKey
		if i+1 < len(b) && b[i+1] == '"' {
			p.beginKey()
			return i + 2
		}
	case c == ']' && arr, c == '}' && !arr:
		// closeContainer, written out: this is the common close, and a
		// call here costs more than the checks.
		if p.depth == p.doc.choicesAt {
			p.doc.choicesAt = 0
		}
		if p.elemAt != 0 {
			p.closeInElems()
		}
		p.popContainer()
		p.valueDone()
		if i++; p.state != sAfterValue || i == len(b) {
			return i
		}
		if i+1 < len(b) && b[i] == ',' && b[i+1] == '"' && !p.inArray() {
			p.beginKey() // nextKey, here without its call back into afterValue
			return i + 2
		}
		goto again // another close, usually
	default:
		p.state = sBad
	}
	return i + 1
}

func (p *jsonScan) atEnd(b []byte, i int) int {
	if i = skipSpace(b, i); i < len(b) {
		p.state = sBad
	}
	return len(b)
}

// beginKey starts a member name (after its opening quote).
func (p *jsonScan) beginKey() {
	p.state, p.isKey, p.counting = sStr, true, false
	p.strCap, p.keyLen, p.keyOver = capKey, 0, false
}

// capture appends decoded string bytes to the key or type buffer.
func (p *jsonScan) capture(s []byte) {
	if p.strCap == capKey {
		n := copy(p.key[p.keyLen:], s)
		p.keyLen += uint8(n)
		p.keyOver = p.keyOver || n < len(s)
		return
	}
	p.doc.str[p.strCap-capType].add(s)
}

// beginValue starts the value whose first byte is c.
func (p *jsonScan) beginValue(c byte) {
	if p.depth == 0 && !p.arrayDocs {
		p.pend, p.pNode = pNode, rootNode
		if c == '[' && p.allowArrayDocs {
			p.arrayDocs = true
			p.pend = pNone
		}
	}
	text := p.text
	p.text = false
	switch {
	case c == '{':
		p.openContainer(false)
	case c == '[':
		p.openContainer(true)
	case c == '"':
		p.state, p.isKey, p.strCap = sStr, false, capNone
		p.counting, p.hi = text, false
		switch p.pend {
		case pField:
			p.setField(stBad, 0)
		case pType:
			p.doc.str[strType].ok, p.strCap = true, capType
		case pEventType:
			p.doc.str[strEventType].ok, p.strCap = true, capEventType
		case pElemType:
			p.doc.str[strElemType].ok, p.strCap = true, capElemType
		}
	case c == '-' || isDigit(c):
		// numPlain tracks the value only where it is a counted field.
		p.state, p.numPlain, p.numOver, p.num = sNum, p.pend == pField, false, 0
		p.numPhase = nMinus
		if c != '-' {
			p.numPhase = nInt
			if c == '0' {
				p.numPhase = nZero
			}
			p.num = int64(c - '0')
		} else {
			p.numPlain = false
		}
	case c == 't':
		p.state, p.lit, p.litPos = sLit, "true", 1
	case c == 'f':
		p.state, p.lit, p.litPos = sLit, "false", 1
	case c == 'n':
		p.state, p.lit, p.litPos = sLit, "null", 1
	default:
		p.state = sBad
	}
}

func (p *jsonScan) setField(st fieldState, v int64) {
	r := &p.doc.slots[p.pSlot]
	r.st[p.pField], r.v[p.pField] = st, v
}

func (p *jsonScan) openContainer(arr bool) {
	if p.depth >= maxJSONDepth {
		p.state = sBad
		return
	}
	pend, nd := p.pend, p.pNode
	if pend == pField {
		p.setField(stBad, 0)
	}
	p.depth++
	d := p.depth
	p.pend, p.arr = pNone, arr
	if arr {
		p.isArr[d>>3] |= 1 << (d & 7)
		p.state = sArrFirst
		if pend == pChoices {
			p.doc.choicesAt = d
		}
		if p.arrayDocs && d == 1 {
			p.pend, p.pNode = pNode, rootNode
		}
		if pend == pNode && (nd.kind() == nkIterations || nd.kind() == nkPredictions) {
			p.openElems(d, nd)
		}
		return
	}
	p.isArr[d>>3] &^= 1 << (d & 7)
	p.state = sObjFirst
	if int(d) >= len(p.nodes) {
		return
	}
	n := node(nkOther)
	if pend == pNode {
		n = nd
		r := &p.doc.slots[nd.slot()]
		switch nd.kind() {
		case nkRoot:
			p.doc.rootObj = true
		case nkReport:
			r.obj = true
		case nkTokens:
			r.tokensObj = true
		case nkBilled:
			r.billedObj = true
		case nkIteration:
			p.elemObjAt = d
			p.doc.str[strElemType] = shortString{}
			r.st[fElIn], r.st[fElCacheCreate], r.st[fElCacheRead], r.st[fElOut] = stAbsent, stAbsent, stAbsent, stAbsent
		case nkPrediction:
			p.elemObjAt = d
			r.st[fElTokenCount] = stAbsent
		}
	}
	p.nodes[d] = n
}

// openElems starts the array at depth d whose elements are read one by one:
// a report's iterations, or D.predictions (whose array is the report).
func (p *jsonScan) openElems(d int32, nd node) {
	s := nd.slot()
	el := nkIteration
	if nd.kind() == nkPredictions {
		el = nkPrediction
		p.doc.slots[s].obj = true
	}
	p.elemAt, p.elemNode = d, mkNode(el, s)
	p.pend, p.pNode = pNode, p.elemNode
}

// closeInElems handles a container closing while an array of elements is
// open: the element itself, or the array.
func (p *jsonScan) closeInElems() {
	switch p.depth {
	case p.elemObjAt:
		p.endElem()
		p.elemObjAt = 0
	case p.elemAt:
		p.elemAt = 0
	}
}

// endElem adds the element just closed to its report: a prediction's
// token_count to the sum, an iteration's counts to the sums when its type
// is compaction (message and fallback_message are the top level itself).
func (p *jsonScan) endElem() {
	s := p.elemNode.slot()
	r := &p.doc.slots[s]
	if p.elemNode.kind() == nkPrediction {
		switch r.st[fElTokenCount] {
		case stBad:
			r.st[fVETokens] = stBad
		case stOK:
			switch r.st[fVETokens] {
			case stOK:
				r.v[fVETokens] = satAdd(r.v[fVETokens], r.v[fElTokenCount])
			case stAbsent:
				r.st[fVETokens], r.v[fVETokens] = stOK, r.v[fElTokenCount]
			}
		}
		return
	}
	if t := &p.doc.str[strElemType]; !t.is("compaction") {
		return // message, fallback_message: the top level; advisor_message: billed elsewhere
	}
	for i := range field(4) {
		switch r.st[fElIn+i] {
		case stBad:
			r.iterBad = true
		case stOK:
			if r.st[fItIn+i] == stOK {
				r.v[fItIn+i] = satAdd(r.v[fItIn+i], r.v[fElIn+i])
			} else {
				r.st[fItIn+i], r.v[fItIn+i] = stOK, r.v[fElIn+i]
			}
		}
	}
}

// closeContainer ends the innermost container (afterValue has a copy).
func (p *jsonScan) closeContainer() {
	if p.depth == p.doc.choicesAt {
		p.doc.choicesAt = 0
	}
	if p.elemAt != 0 {
		p.closeInElems()
	}
	p.popContainer()
	p.valueDone()
}

// valueDone is called after any complete value. It inlines: only the
// document's value, or an element document's, needs more (valueDoneTop).
func (p *jsonScan) valueDone() {
	p.pend, p.state = pNone, sAfterValue
	if p.depth == 0 || p.arrayDocs && p.depth == 1 {
		p.valueDoneTop()
	}
}

// valueDoneTop ends a value at depth 0 (the document) or 1 (an element
// document of a top-level array).
func (p *jsonScan) valueDoneTop() {
	if p.depth == 0 {
		p.state = sEnd
		return
	}
	// one element document is complete
	p.acc.applyDoc(&p.doc)
	p.doc.reset()
}

func (p *jsonScan) endNumber() {
	if p.pend == pField {
		if p.numPlain && !p.numOver {
			p.setField(stOK, p.num)
		} else {
			p.setField(stBad, 0)
		}
	}
	p.valueDone()
}

func (p *jsonScan) endLiteral() {
	switch p.pend {
	case pField:
		if p.lit == "null" {
			p.setField(stNull, 0)
		} else {
			p.setField(stBad, 0)
		}
	case pDone:
		p.doc.done = p.lit == "true"
	}
	p.valueDone()
}

// numByte consumes c as part of a number and reports whether it did.
func (p *jsonScan) numByte(c byte) bool {
	digit := isDigit(c)
	switch p.numPhase {
	case nMinus, nDot, nESign:
		if !digit {
			return false
		}
		switch {
		case p.numPhase == nDot:
			p.numPhase = nFrac
		case p.numPhase == nESign:
			p.numPhase = nExp
		case c == '0':
			p.numPhase = nZero
		default:
			p.numPhase = nInt
		}
	case nZero, nInt:
		switch {
		case digit && p.numPhase == nZero:
			return false // a digit after a leading zero ends the number (then fails)
		case digit:
			p.addDigit(c)
		case c == '.':
			p.numPhase, p.numPlain = nDot, false
		case c == 'e' || c == 'E':
			p.numPhase, p.numPlain = nE, false
		default:
			return false
		}
	case nFrac:
		switch {
		case digit:
		case c == 'e' || c == 'E':
			p.numPhase = nE
		default:
			return false
		}
	case nE:
		switch {
		case c == '+' || c == '-':
			p.numPhase = nESign
		case digit:
			p.numPhase = nExp
		default:
			return false
		}
	case nExp:
		return digit
	}
	return true
}

// addDigit appends an integer digit to a counted field's value.
func (p *jsonScan) addDigit(c byte) {
	if !p.numPlain {
		return
	}
	d := int64(c - '0')
	if p.num > (1<<63-1-d)/10 {
		p.numOver = true
	} else {
		p.num = p.num*10 + d
	}
}

// onKey decides what the value of the member just read means.
// h is memberHash(w, len(name)), an occupied slot; the caller has set
// pend and text to none.
func (p *jsonScan) onKey(h uint, name []byte, w uint64) {
	m := lookupMemberFrom(h, name, w)
	if m == nil {
		return
	}
	p.text = m.text
	switch n := p.node(); n.kind() {
	case nkRoot:
		p.rootKey(m)
	case nkContainer:
		if s := n.slot(); paths[s].sub == m.name {
			p.expectNode(nkReport, s)
		}
	case nkReport:
		p.reportKey(n.slot(), m)
	case nkTokens, nkBilled:
		in, out := fTokIn, fTokOut
		if n.kind() == nkBilled {
			in, out = fBillIn, fBillOut
		}
		switch m.field {
		case fInput:
			p.expectField(n.slot(), in)
		case fOutput:
			p.expectField(n.slot(), out)
		}
	case nkPromptDetails, nkComplDetails, nkInDetails, nkOutDetails, nkIteration, nkPrediction, nkEmbeddings, nkStatistics:
		p.subKey(n, m)
	}
}

// subKey handles a member of an object inside a report or an element: a
// details object, an iteration, a prediction and its embeddings.
func (p *jsonScan) subKey(n node, m *member) {
	s := n.slot()
	r := &p.doc.slots[s]
	switch n.kind() {
	case nkPromptDetails:
		if m.role == roleCachedTokens {
			p.expectField(s, fOACached)
		}
	case nkComplDetails:
		if m.role == roleReasoningTokens {
			p.expectField(s, fOAReasoning)
		}
	case nkInDetails:
		if m.role == roleCachedTokens {
			p.expectField(s, fRCached)
		}
	case nkOutDetails:
		if m.role == roleReasoningTokens {
			p.expectField(s, fRReasoning)
		}
	case nkIteration:
		switch {
		case m.role == roleType:
			p.doc.str[strElemType] = shortString{}
			p.pend = pElemType
		case m.field == fInput:
			p.expectField(s, fElIn)
		case m.field == fCacheCreate:
			p.expectField(s, fElCacheCreate)
		case m.field == fCacheRead:
			p.expectField(s, fElCacheRead)
		case m.field == fOutput:
			p.expectField(s, fElOut)
		}
	case nkPrediction:
		if m.role == roleEmbeddings {
			r.st[fElTokenCount] = stAbsent
			p.pend, p.pNode = pNode, mkNode(nkEmbeddings, s)
		}
	case nkEmbeddings:
		if m.role == roleStatistics {
			r.st[fElTokenCount] = stAbsent
			p.pend, p.pNode = pNode, mkNode(nkStatistics, s)
		}
	case nkStatistics:
		if m.role == roleTokenCount {
			p.expectField(s, fElTokenCount)
		}
	}
}

// rootKey handles a member of the document's top-level object.
func (p *jsonScan) rootKey(m *member) {
	d := &p.doc
	if s := m.row; s != slotNone {
		k := nkReport
		switch {
		case paths[s].sub != "":
			k = nkContainer
		case paths[s].elems:
			k = nkPredictions
		}
		p.expectNode(k, s)
		return
	}
	switch m.role {
	case roleType:
		d.str[strType] = shortString{}
		p.pend = pType
	case roleEventType:
		d.str[strEventType] = shortString{}
		p.pend = pEventType
	case roleDone:
		d.done = false
		p.pend = pDone
	case roleChoices:
		d.choicesAt, d.choicesEmpty = 0, false
		p.pend = pChoices
	default:
		if m.rootField != noField {
			p.expectField(slotRoot, m.rootField)
		}
	}
}

// reportKey handles a member of a report object.
func (p *jsonScan) reportKey(s slot, m *member) {
	r := &p.doc.slots[s]
	switch m.role {
	case roleTokens:
		r.tokensObj = false
		r.st[fTokIn], r.st[fTokOut] = stAbsent, stAbsent
		p.pend, p.pNode = pNode, mkNode(nkTokens, s)
		return
	case roleBilled:
		r.billedObj = false
		r.st[fBillIn], r.st[fBillOut] = stAbsent, stAbsent
		p.pend, p.pNode = pNode, mkNode(nkBilled, s)
		return
	case roleIterations:
		// A repeated member replaces what an earlier one said.
		r.iterBad = false
		for f := fItIn; f <= fItOut; f++ {
			r.st[f] = stAbsent
		}
		p.pend, p.pNode = pNode, mkNode(nkIterations, s)
		return
	case rolePromptDetails, roleComplDetails, roleInDetails, roleOutDetails:
		k, f := nkPromptDetails, fOACached
		switch m.role {
		case roleComplDetails:
			k, f = nkComplDetails, fOAReasoning
		case roleInDetails:
			k, f = nkInDetails, fRCached
		case roleOutDetails:
			k, f = nkOutDetails, fRReasoning
		}
		r.st[f] = stAbsent
		p.pend, p.pNode = pNode, mkNode(k, s)
		return
	}
	f := m.field
	if paths[s].style == styleOllama {
		f = m.rootField
	}
	if f != noField {
		r.keys |= 1 << f
		p.expectField(s, f)
	}
}

// expectNode: the value, if an object, is node (k, s); a repeated member
// replaces what an earlier one said.
func (p *jsonScan) expectNode(k nodeKind, s slot) {
	p.doc.clearSlot(s)
	p.pend, p.pNode = pNode, mkNode(k, s)
}

// expectField: the value is counted field f of row s.
func (p *jsonScan) expectField(s slot, f field) {
	p.pend, p.pSlot, p.pField = pField, s, f
	p.doc.dirty |= 1 << s
	p.setField(stAbsent, 0)
}
