package llmrate

import (
	"encoding/binary"
	"math/bits"
)

// jsonScan is an incremental (push) JSON parser that validates one document
// at a time, byte by byte, across any write boundaries, in constant memory,
// and records only the values at the fixed usage paths. Everything else —
// generated text, tool arguments, nested look-alikes — is validated and
// skipped, never interpreted.

// maxJSONDepth matches encoding/json's nesting limit, so a document is valid
// here exactly when encoding/json accepts it.
const maxJSONDepth = 10000

// Report slots, in the order of the fixed-path table.
const (
	slotXGroq    = 1 // D.x_groq.usage
	slotUsage    = 2 // D.usage
	slotMessage  = 3 // D.message.usage     if D.type == "message_start"
	slotResponse = 4 // D.response.usage    if D.type starts with "response."
	slotDelta    = 5 // D.delta.usage       if D.type == "message-end"
	slotMeta     = 6 // D.meta              if it has tokens or billed_units
	slotGemini   = 7 // D.usageMetadata
	slotRoot     = 8 // D itself            if D.done == true (Ollama)
	numSlots     = 9
)

// Node kinds: what an object at a tracked depth is. Packed with a slot as
// kind<<4 | slot.
// rootNode is the packed node of a document's top-level object.
const rootNode = nkRoot<<4 | slotRoot

const (
	nkOther = iota
	nkRoot
	nkXGroq
	nkMessage
	nkResponse
	nkDelta
	nkReport
	nkTokens
	nkBilled
)

// What the value being parsed means.
const (
	pNone  = iota
	pNode  // an object of kind pArg
	pField // counted field pArg (slot pSlot)
	pType  // D.type
	pDone  // D.done
)

const (
	typNone = iota
	typString
)

// docState is what one document says at the fixed paths.
type docState struct {
	slots   [numSlots]report
	dirty   uint16 // slots to clear on reset
	typ     [24]byte
	typLen  uint8
	typOver bool
	typKind uint8
	done    bool
}

func (d *docState) reset() {
	for s := 0; d.dirty != 0; s++ {
		if d.dirty&(1<<s) != 0 {
			d.slots[s] = report{}
			d.dirty &^= 1 << s
		}
	}
	d.typLen, d.typOver, d.typKind, d.done = 0, false, typNone, false
}

func (d *docState) clearSlot(s int) {
	if d.dirty&(1<<s) != 0 {
		d.slots[s] = report{}
	}
	d.dirty |= 1 << s
}

// Parser states.
const (
	sValue      = iota // a value is expected
	sArrFirst          // after '[': a value or ']'
	sObjFirst          // after '{': a key or '}'
	sObjKey            // after ',' in an object: a key
	sColon             // after a key
	sAfterValue        // after a value inside a container: ',' or close
	sEnd               // after the top-level value: whitespace only
	sStr               // inside a string
	sStrEsc            // after a backslash
	sStrU              // inside \uXXXX
	sNum               // inside a number
	sLit               // inside true/false/null
	sBad               // the document is invalid; ignore the rest
)

// Number phases (the JSON number grammar).
const (
	nMinus = iota // after '-'
	nZero         // a leading 0
	nInt          // integer digits
	nDot          // after '.'
	nFrac         // fraction digits
	nE            // after 'e'/'E'
	nESign        // after the exponent sign
	nExp          // exponent digits
)

const (
	capNone = iota // string content is skipped
	capKey         // captured as a member name at a tracked object
	capType        // captured as D.type
)

type jsonScan struct {
	state uint8
	// arrayDocs: the body's top-level value is an array whose elements are
	// each a document (Gemini streamGenerateContent without alt=sse).
	allowArrayDocs bool
	arrayDocs      bool
	depth          int32
	isArr          [maxJSONDepth/8 + 1]uint8 // bit per depth: container is an array
	nodes          [6]uint8                  // node of the object at depth 1..5

	// the value being parsed
	pend, pArg, pSlot uint8

	// strings
	strCap  uint8
	isKey   bool
	key     [32]byte
	keyLen  uint8
	keyOver bool
	uhex    uint8
	ucp     uint16

	// numbers
	numPhase uint8
	numPlain bool // digits only so far
	numOver  bool
	num      int64

	// literals
	lit    string
	litPos uint8

	doc docState
	acc *usageAcc
}

func (p *jsonScan) init(acc *usageAcc, allowArrayDocs bool) {
	p.acc = acc
	p.allowArrayDocs = allowArrayDocs
	p.resetDoc()
}

// resetDoc prepares for a new document.
func (p *jsonScan) resetDoc() {
	p.state = sValue
	p.depth = 0
	p.arrayDocs = false
	p.pend = pNone
	p.doc.reset()
}

// node returns the tracked node of the object at the current depth.
func (p *jsonScan) node() uint8 {
	if p.depth >= 1 && int(p.depth) < len(p.nodes) && p.isArr[p.depth>>3]&(1<<(p.depth&7)) == 0 {
		return p.nodes[p.depth]
	}
	return nkOther
}

// end finishes the current document at end of input and applies it if it is
// complete and valid.
func (p *jsonScan) end() {
	valid := p.state == sEnd
	if p.state == sNum && p.depth == 0 && p.numTerminal() {
		valid = true // a bare top-level number; carries no usage either way
	}
	if valid && !p.arrayDocs {
		p.acc.applyDoc(&p.doc)
	}
	p.resetDoc()
}

func (p *jsonScan) numTerminal() bool {
	switch p.numPhase {
	case nZero, nInt, nFrac, nExp:
		return true
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// write feeds document bytes.
func (p *jsonScan) write(b []byte) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch p.state {
		case sStr:
			// Fast path: skip plain string bytes, eight at a time.
			j := i + plainRun(b[i:])
			if j < len(b) {
				c = b[j]
			}
			if p.strCap != capNone {
				p.capture(b[i:j])
			}
			if j == len(b) {
				return
			}
			i = j
			switch {
			case c == '"':
				p.endString()
				// Fast path: a member name is usually followed at once by
				// ':' and the value's first byte.
				if p.state == sColon && i+2 < len(b) && b[i+1] == ':' {
					i++
					p.state = sValue
					if c = b[i+1]; c == '"' || c == '{' || c == '[' || c == 'n' || (c >= '0' && c <= '9') {
						i++
						p.beginValue(c)
					}
				}
			case c == '\\':
				p.state = sStrEsc
			default:
				p.state = sBad
			}
		case sStrEsc:
			var r byte
			switch c {
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
				continue
			default:
				p.state = sBad
				continue
			}
			p.state = sStr
			if p.strCap != capNone {
				p.capture([]byte{r})
			}
		case sStrU:
			var h byte
			switch {
			case c >= '0' && c <= '9':
				h = c - '0'
			case c >= 'a' && c <= 'f':
				h = c - 'a' + 10
			case c >= 'A' && c <= 'F':
				h = c - 'A' + 10
			default:
				p.state = sBad
				continue
			}
			p.ucp = p.ucp<<4 | uint16(h)
			if p.uhex++; p.uhex == 4 {
				p.state = sStr
				if p.strCap != capNone {
					r := byte(0xFF) // non-ASCII: never matches a name we look for
					if p.ucp < 0x80 {
						r = byte(p.ucp)
					}
					p.capture([]byte{r})
				}
			}
		case sNum:
			if p.numPhase == nInt && !p.numPlain || p.numPhase == nFrac || p.numPhase == nExp {
				// Fast path: digits whose value is not needed.
				j := i
				for j < len(b) && b[j] >= '0' && b[j] <= '9' {
					j++
				}
				if j == len(b) {
					return
				}
				if j > i {
					i, c = j, b[j]
				}
			}
			if p.numByte(c) {
				continue
			}
			if !p.numTerminal() {
				p.state = sBad
				continue
			}
			p.endNumber()
			i-- // reprocess c after the number
		case sLit:
			if c != p.lit[p.litPos] {
				p.state = sBad
				continue
			}
			if p.litPos++; int(p.litPos) == len(p.lit) {
				p.endLiteral()
			}
		case sValue, sArrFirst:
			if isSpace(c) {
				continue
			}
			if c == ']' && p.state == sArrFirst {
				p.closeContainer()
				continue
			}
			p.beginValue(c)
		case sObjFirst, sObjKey:
			if isSpace(c) {
				continue
			}
			switch {
			case c == '"':
				p.beginKey()
			case c == '}' && p.state == sObjFirst:
				p.closeContainer()
			default:
				p.state = sBad
			}
		case sColon:
			if isSpace(c) {
				continue
			}
			if c != ':' {
				p.state = sBad
				continue
			}
			p.state = sValue
		case sAfterValue:
			if isSpace(c) {
				continue
			}
			arr := p.isArr[p.depth>>3]&(1<<(p.depth&7)) != 0
			switch {
			case c == ',' && arr:
				p.state, p.pend = sValue, pNone
				if p.arrayDocs && p.depth == 1 {
					p.pend, p.pArg = pNode, rootNode
				}
			case c == ',':
				p.state = sObjKey
				if i+1 < len(b) && b[i+1] == '"' {
					i++
					p.beginKey()
				}
			case c == ']' && arr:
				p.closeContainer()
			case c == '}' && !arr:
				p.closeContainer()
			default:
				p.state = sBad
			}
		case sEnd:
			if !isSpace(c) {
				p.state = sBad
			}
		case sBad:
			return
		}
	}
}

// beginKey starts a member name (after its opening quote).
func (p *jsonScan) beginKey() {
	p.state, p.isKey = sStr, true
	p.strCap = capNone
	if p.node() != nkOther {
		p.strCap, p.keyLen, p.keyOver = capKey, 0, false
	}
}

// plainRun returns how many leading bytes of b are plain string content:
// not '"', not '\\', not a control byte. It tests eight bytes per step
// (SWAR): a word's flag bits are set at bytes that are a quote, a backslash
// or below 0x20, and the lowest flag is always exact.
func plainRun(b []byte) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (ones * '"')
		s := x ^ (ones * '\\')
		m := ((q - ones) &^ q) | ((s - ones) &^ s) | ((x - ones*0x20) &^ x)
		if m &= highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			break
		}
	}
	return i
}

// capture appends decoded string bytes to the key or type buffer.
func (p *jsonScan) capture(s []byte) {
	if p.strCap == capKey {
		n := copy(p.key[p.keyLen:], s)
		p.keyLen += uint8(n)
		p.keyOver = p.keyOver || n < len(s)
		return
	}
	d := &p.doc
	n := copy(d.typ[d.typLen:], s)
	d.typLen += uint8(n)
	d.typOver = d.typOver || n < len(s)
}

// beginValue starts the value whose first byte is c.
func (p *jsonScan) beginValue(c byte) {
	if p.depth == 0 && !p.arrayDocs {
		p.pend, p.pArg = pNode, rootNode
		if c == '[' && p.allowArrayDocs {
			p.arrayDocs = true
			p.pend = pNone
		}
	}
	switch {
	case c == '{':
		p.openContainer(false)
	case c == '[':
		p.openContainer(true)
	case c == '"':
		p.state, p.isKey, p.strCap = sStr, false, capNone
		switch p.pend {
		case pField:
			p.setField(stBad, 0)
		case pType:
			p.doc.typKind = typString
			p.strCap = capType
		}
	case c == '-' || (c >= '0' && c <= '9'):
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

func (p *jsonScan) setField(st uint8, v int64) {
	r := &p.doc.slots[p.pSlot]
	r.st[p.pArg], r.v[p.pArg] = st, v
}

func (p *jsonScan) openContainer(arr bool) {
	if p.depth >= maxJSONDepth {
		p.state = sBad
		return
	}
	pend, arg := p.pend, p.pArg
	if pend == pField {
		p.setField(stBad, 0)
	}
	p.depth++
	d := p.depth
	if arr {
		p.isArr[d>>3] |= 1 << (d & 7)
		p.state = sArrFirst
		p.pend = pNone
		if p.arrayDocs && d == 1 {
			p.pend, p.pArg = pNode, rootNode
		}
		return
	}
	p.isArr[d>>3] &^= 1 << (d & 7)
	p.state = sObjFirst
	p.pend = pNone
	if int(d) >= len(p.nodes) {
		return
	}
	node := uint8(nkOther)
	if pend == pNode {
		node = arg
		slot := arg & 15
		r := &p.doc.slots[slot]
		switch arg >> 4 {
		case nkRoot:
			p.doc.dirty |= 1 << slotRoot
			p.doc.slots[slotRoot].obj = true
		case nkReport:
			r.obj = true
		case nkTokens:
			r.tokensObj = true
		case nkBilled:
			r.billedObj = true
		}
	}
	p.nodes[d] = node
}

func (p *jsonScan) closeContainer() {
	p.depth--
	p.valueDone()
}

// valueDone is called after any complete value.
func (p *jsonScan) valueDone() {
	p.pend = pNone
	if p.depth == 0 {
		p.state = sEnd
		return
	}
	p.state = sAfterValue
	if p.arrayDocs && p.depth == 1 {
		// one element document is complete
		p.acc.applyDoc(&p.doc)
		p.doc.reset()
	}
}

func (p *jsonScan) endString() {
	if p.isKey {
		p.isKey = false
		p.state = sColon
		if p.strCap == capKey {
			p.strCap = capNone
			p.onKey()
		} else {
			p.pend = pNone
		}
		return
	}
	p.strCap = capNone
	p.valueDone()
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
	digit := c >= '0' && c <= '9'
	switch p.numPhase {
	case nMinus:
		if !digit {
			return false
		}
		p.numPhase = nInt
		if c == '0' {
			p.numPhase = nZero
		}
	case nZero:
		switch {
		case c == '.':
			p.numPhase, p.numPlain = nDot, false
		case c == 'e' || c == 'E':
			p.numPhase, p.numPlain = nE, false
		default:
			return false // a digit after a leading zero ends the number (then fails)
		}
	case nInt:
		switch {
		case digit:
			if p.numPlain {
				d := int64(c - '0')
				if p.num > (1<<63-1-d)/10 {
					p.numOver = true
				} else {
					p.num = p.num*10 + d
				}
			}
		case c == '.':
			p.numPhase, p.numPlain = nDot, false
		case c == 'e' || c == 'E':
			p.numPhase, p.numPlain = nE, false
		default:
			return false
		}
	case nDot:
		if !digit {
			return false
		}
		p.numPhase = nFrac
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
	case nESign:
		if !digit {
			return false
		}
		p.numPhase = nExp
	case nExp:
		if !digit {
			return false
		}
	}
	return true
}

// onKey decides what the value of the member just read means.
func (p *jsonScan) onKey() {
	p.pend = pNone
	if p.keyOver {
		return
	}
	name := p.key[:p.keyLen]
	node := p.node()
	d := &p.doc
	node2 := func(kind uint8, slot int) {
		d.clearSlot(slot)
		p.pend, p.pArg = pNode, kind<<4|uint8(slot)
	}
	switch node >> 4 {
	case nkRoot:
		switch string(name) {
		case "x_groq":
			node2(nkXGroq, slotXGroq)
		case "usage":
			node2(nkReport, slotUsage)
		case "message":
			node2(nkMessage, slotMessage)
		case "response":
			node2(nkResponse, slotResponse)
		case "delta":
			node2(nkDelta, slotDelta)
		case "meta":
			node2(nkReport, slotMeta)
		case "usageMetadata":
			node2(nkReport, slotGemini)
		case "type":
			d.typLen, d.typOver, d.typKind = 0, false, typNone
			p.pend = pType
		case "done":
			d.done = false
			p.pend = pDone
		case "prompt_eval_count":
			p.pend, p.pSlot, p.pArg = pField, slotRoot, fOPromptEval
			p.setField(stAbsent, 0)
		case "eval_count":
			p.pend, p.pSlot, p.pArg = pField, slotRoot, fOEval
			p.setField(stAbsent, 0)
		}
	case nkXGroq, nkMessage, nkResponse, nkDelta:
		if string(name) == "usage" {
			node2(nkReport, int(node&15))
		}
	case nkReport:
		slot := node & 15
		r := &d.slots[slot]
		switch string(name) {
		case "tokens":
			r.tokensObj = false
			r.st[fTokIn], r.st[fTokOut] = stAbsent, stAbsent
			p.pend, p.pArg = pNode, nkTokens<<4|slot
			return
		case "billed_units":
			r.billedObj = false
			r.st[fBillIn], r.st[fBillOut] = stAbsent, stAbsent
			p.pend, p.pArg = pNode, nkBilled<<4|slot
			return
		}
		if f := reportField(name); f >= 0 {
			r.keys |= 1 << f
			p.pend, p.pSlot, p.pArg = pField, slot, uint8(f)
			p.setField(stAbsent, 0)
		}
	case nkTokens, nkBilled:
		in, out := uint8(fTokIn), uint8(fTokOut)
		if node>>4 == nkBilled {
			in, out = fBillIn, fBillOut
		}
		p.pSlot = node & 15
		switch string(name) {
		case "input_tokens":
			p.pend, p.pArg = pField, in
			p.setField(stAbsent, 0)
		case "output_tokens":
			p.pend, p.pArg = pField, out
			p.setField(stAbsent, 0)
		}
	}
}
