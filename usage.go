package llmrate

// Usage is the token usage a provider reported for one response.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}

// Total returns InputTokens + OutputTokens, saturating at the int64 maximum.
func (u Usage) Total() int64 { return satAdd(u.InputTokens, u.OutputTokens) }

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// Local field ids: the counted fields a usage report object can carry.
const (
	fPrompt           = iota // prompt_tokens
	fCompletion              // completion_tokens
	fInput                   // input_tokens
	fOutput                  // output_tokens
	fCacheCreate             // cache_creation_input_tokens
	fCacheRead               // cache_read_input_tokens
	fBInput                  // inputTokens
	fBOutput                 // outputTokens
	fBCacheRead              // cacheReadInputTokens
	fBCacheWrite             // cacheWriteInputTokens
	fBCacheReadAlias         // cacheReadInputTokenCount
	fBCacheWriteAlias        // cacheWriteInputTokenCount
	fGPrompt                 // promptTokenCount
	fGTool                   // toolUsePromptTokenCount
	fGCand                   // candidatesTokenCount
	fGThoughts               // thoughtsTokenCount
	fOPromptEval             // prompt_eval_count (document root)
	fOEval                   // eval_count (document root)
	fTokIn                   // tokens.input_tokens
	fTokOut                  // tokens.output_tokens
	fBillIn                  // billed_units.input_tokens
	fBillOut                 // billed_units.output_tokens
	numLocal
)

// reportField maps a member name inside a usage report object to its field.
func reportField(name []byte) int {
	switch string(name) {
	case "prompt_tokens":
		return fPrompt
	case "completion_tokens":
		return fCompletion
	case "input_tokens":
		return fInput
	case "output_tokens":
		return fOutput
	case "cache_creation_input_tokens":
		return fCacheCreate
	case "cache_read_input_tokens":
		return fCacheRead
	case "inputTokens":
		return fBInput
	case "outputTokens":
		return fBOutput
	case "cacheReadInputTokens":
		return fBCacheRead
	case "cacheWriteInputTokens":
		return fBCacheWrite
	case "cacheReadInputTokenCount":
		return fBCacheReadAlias
	case "cacheWriteInputTokenCount":
		return fBCacheWriteAlias
	case "promptTokenCount":
		return fGPrompt
	case "toolUsePromptTokenCount":
		return fGTool
	case "candidatesTokenCount":
		return fGCand
	case "thoughtsTokenCount":
		return fGThoughts
	}
	return -1
}

// Field value states.
const (
	stAbsent = iota
	stNull
	stOK  // a plain non-negative integer literal that fits in int64
	stBad // any other value: rejects the whole report
)

// report is one candidate usage report: what the parser saw at one of the
// fixed paths of a document.
type report struct {
	obj       bool   // the path held a JSON object
	tokensObj bool   // member "tokens" holds an object (Cohere)
	billedObj bool   // member "billed_units" holds an object (Cohere)
	keys      uint32 // 1<<field for every counted member name present
	st        [numLocal]uint8
	v         [numLocal]int64
}

// Kept fields: one value per counted field per style; last value wins.
const (
	kOAIn = iota
	kOAOut
	kANIn
	kANCacheC
	kANCacheR
	kANOut
	kBRIn
	kBRCacheR
	kBRCacheW
	kBROut
	kCOIn
	kCOOut
	kGEPrompt
	kGETool
	kGECand
	kGEThoughts
	kOLIn
	kOLOut
	numKept
)

var keptIsOutput = [numKept]bool{kOAOut: true, kANOut: true, kBROut: true, kCOOut: true, kGECand: true, kGEThoughts: true, kOLOut: true}

// usageAcc combines accepted reports: each accepted report overwrites the
// kept fields it carries; reports are never summed.
type usageAcc struct {
	any  bool
	have [numKept]bool
	v    [numKept]int64
}

func (a *usageAcc) result() (Usage, bool) {
	if !a.any {
		return Usage{}, false
	}
	var u Usage
	for k := range a.v {
		if !a.have[k] {
			continue
		}
		if keptIsOutput[k] {
			u.OutputTokens = satAdd(u.OutputTokens, a.v[k])
		} else {
			u.InputTokens = satAdd(u.InputTokens, a.v[k])
		}
	}
	return u, true
}

// commit accepts a report's fields (pairs of local field, kept field) unless
// any of them is malformed or none is present.
func (a *usageAcc) commit(r *report, pairs ...[2]uint8) {
	n := 0
	for _, p := range pairs {
		switch r.st[p[0]] {
		case stBad:
			return
		case stOK:
			n++
		}
	}
	if n == 0 {
		return
	}
	for _, p := range pairs {
		if r.st[p[0]] == stOK {
			a.v[p[1]] = r.v[p[0]]
			a.have[p[1]] = true
		}
	}
	a.any = true
}

func has(r *report, f int) bool { return r.st[f] == stOK || r.st[f] == stBad }

// applyReport applies a report whose style is decided by its keys (paths
// 1–6). cohereOnly restricts it to the Cohere style (path 6, D.meta).
func (a *usageAcc) applyReport(r *report, cohereOnly bool) {
	if !r.obj {
		return
	}
	switch {
	case r.tokensObj || r.billedObj:
		in, out := uint8(fBillIn), uint8(fBillOut)
		if r.tokensObj && (has(r, fTokIn) || has(r, fTokOut)) {
			in, out = fTokIn, fTokOut
		}
		a.commit(r, [2]uint8{in, kCOIn}, [2]uint8{out, kCOOut})
	case cohereOnly:
	case r.keys&(1<<fBInput|1<<fBOutput) != 0:
		cr, cw := uint8(fBCacheRead), uint8(fBCacheWrite)
		if r.st[cr] <= stNull {
			cr = fBCacheReadAlias
		}
		if r.st[cw] <= stNull {
			cw = fBCacheWriteAlias
		}
		a.commit(r, [2]uint8{fBInput, kBRIn}, [2]uint8{cr, kBRCacheR}, [2]uint8{cw, kBRCacheW}, [2]uint8{fBOutput, kBROut})
	case r.keys&(1<<fInput|1<<fOutput) != 0:
		a.commit(r, [2]uint8{fInput, kANIn}, [2]uint8{fCacheCreate, kANCacheC}, [2]uint8{fCacheRead, kANCacheR}, [2]uint8{fOutput, kANOut})
	case r.keys&(1<<fPrompt|1<<fCompletion) != 0:
		a.commit(r, [2]uint8{fPrompt, kOAIn}, [2]uint8{fCompletion, kOAOut})
	}
}

// applyDoc applies the reports of one complete, valid JSON document, in the
// order of the fixed-path table (fixtures/usage/README.md §3).
func (a *usageAcc) applyDoc(d *docState) {
	if !d.slots[slotRoot].obj {
		return
	}
	a.applyReport(&d.slots[slotXGroq], false)
	a.applyReport(&d.slots[slotUsage], false)
	typ := d.typ[:min(int(d.typLen), len(d.typ))]
	isType := d.typKind == typString && !d.typOver
	if isType && string(typ) == "message_start" {
		a.applyReport(&d.slots[slotMessage], false)
	}
	if d.typKind == typString && len(typ) >= 9 && string(typ[:9]) == "response." {
		a.applyReport(&d.slots[slotResponse], false)
	}
	if isType && string(typ) == "message-end" {
		a.applyReport(&d.slots[slotDelta], false)
	}
	a.applyReport(&d.slots[slotMeta], true)
	if r := &d.slots[slotGemini]; r.obj {
		a.commit(r, [2]uint8{fGPrompt, kGEPrompt}, [2]uint8{fGTool, kGETool}, [2]uint8{fGCand, kGECand}, [2]uint8{fGThoughts, kGEThoughts})
	}
	if d.done {
		a.commit(&d.slots[slotRoot], [2]uint8{fOPromptEval, kOLIn}, [2]uint8{fOEval, kOLOut})
	}
}
