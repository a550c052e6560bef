package usage

import (
	"encoding/binary"
	"math/bits"
)

// This file is the provider table: every place a usage report may be, how
// its fields count, which member names let the SSE fast path rule a report
// out, and which members hold generated text. Adding a provider path is one
// row in paths (plus a fixture under testdata/usage at the module root);
// a new way of counting fields is one style. What each kept value adds to
// and which breakdown field of Usage it is part of (cache reads, cache
// writes, reasoning) are keptCounts and keptKinds.

// slot identifies a row of paths: one place a report may be.
type slot uint8

const (
	slotNone          slot = iota
	slotXGroq              // D.x_groq.usage
	slotUsage              // D.usage
	slotMessage            // D.message.usage  if D.type == "message_start"
	slotResponse           // D.response.usage if D.type starts with "response."
	slotDelta              // D.delta.usage    if D.type == "message-end"
	slotMeta               // D.meta           if it has tokens or billed_units
	slotGemini             // D.usageMetadata
	slotRoot               // D itself         if D.done == true
	slotBedrockInvoke      // D["amazon-bedrock-invocationMetrics"]
	slotInteraction        // D.interaction.usage if D.event_type == "interaction.completed"
	slotPredictions        // D.predictions (an array)
	numSlots
)

// cond is a condition on a document for a report to count.
type cond uint8

const (
	always      cond = iota
	typeIs           // D.type is the string arg
	eventTypeIs      // D.event_type is the string arg
	typePrefix       // D.type is a string starting with arg
	doneTrue         // D.done is true
)

// style says how a report's fields count.
type style uint8

const (
	styleByKeys style = iota // decided by the keys present: Cohere, Bedrock, Anthropic/Responses, OpenAI
	styleCohere              // only the Cohere style (tokens / billed_units)
	styleGemini              // usageMetadata
	styleOllama              // prompt_eval_count / eval_count on the document itself
	// styleInvocationMetrics: Bedrock InvokeModel's inputTokenCount /
	// outputTokenCount (and cache…InputTokenCount). They restate the
	// model's own input, cache and output counts, so they overwrite the
	// same kept values as the Anthropic-style fields (input_tokens,
	// cache_*_input_tokens, output_tokens): last value wins, per field, and
	// a Claude stream's message_delta and its invocationMetrics are never
	// added together.
	styleInvocationMetrics
	// styleVertexEmbed: Vertex AI text embeddings, the sum of
	// predictions[].embeddings.statistics.token_count as input.
	styleVertexEmbed
)

// path is one place a usage report may be, in document D.
type path struct {
	member  string // D's member holding the report ("" for D itself)
	sub     string // the member of D.member holding the report ("" when D.member is the report)
	when    cond
	arg     string // cond's argument
	style   style
	partial bool // a report here never states the whole usage
	elems   bool // D.member is an array whose elements hold the report's counts
	// markers: member names one of which an event must spell (quoted) to
	// hold this report; an event with none of them is skipped unparsed.
	markers []string
}

// paths is the table, in the order reports of one document are applied.
var paths = [numSlots]path{
	slotXGroq:         {member: "x_groq", sub: "usage", markers: []string{"usage"}},                                                                       // Groq streaming
	slotUsage:         {member: "usage", markers: []string{"usage"}},                                                                                      // OpenAI-style, Anthropic, Cohere v2, Bedrock, …
	slotMessage:       {member: "message", sub: "usage", when: typeIs, arg: "message_start", partial: true, markers: []string{"usage"}},                   // Anthropic stream start
	slotResponse:      {member: "response", sub: "usage", when: typePrefix, arg: "response.", markers: []string{"usage"}},                                 // OpenAI Responses stream
	slotDelta:         {member: "delta", sub: "usage", when: typeIs, arg: "message-end", markers: []string{"usage"}},                                      // Cohere v2 stream
	slotMeta:          {member: "meta", style: styleCohere, markers: []string{"meta"}},                                                                    // Cohere embed, v1
	slotGemini:        {member: "usageMetadata", style: styleGemini, markers: []string{"usageMetadata"}},                                                  // Gemini, Vertex AI
	slotRoot:          {when: doneTrue, style: styleOllama, markers: []string{"prompt_eval_count", "eval_count"}},                                         // Ollama native
	slotBedrockInvoke: {member: "amazon-bedrock-invocationMetrics", style: styleInvocationMetrics, markers: []string{"amazon-bedrock-invocationMetrics"}}, // Bedrock InvokeModel(WithResponseStream)
	slotInteraction:   {member: "interaction", sub: "usage", when: eventTypeIs, arg: "interaction.completed", markers: []string{"usage"}},                 // Gemini Interactions stream
	slotPredictions:   {member: "predictions", style: styleVertexEmbed, elems: true, markers: []string{"predictions"}},                                    // Vertex AI text embeddings
}

// textMembers are the members whose string values are generated text, at
// any depth (G in Result.GeneratedBytes).
var textMembers = [...]string{
	"content", "text", "partial_json", "thinking", "arguments",
	"delta", "reasoning_content", "reasoning", "refusal", "response",
}

// member is everything a member name can mean to the parser, gathered from
// the tables in this file once, so the parser looks each name up once.
type member struct {
	name      string
	word      uint64  // nameWord of name
	text      bool    // one of textMembers
	row       slot    // the row whose member this is, or slotNone
	field     field   // its field in a report of any style but Ollama's, or noField
	rootField field   // its field on the document itself (Ollama), or noField
	role      keyRole // what it means at the root or in a report, beyond the rows
}

// keyRole is a member name the parser follows for the rows' conditions and
// the Cohere sub-objects.
type keyRole uint8

const (
	roleNone            keyRole = iota
	roleType                    // D.type (typeIs, typePrefix)
	roleDone                    // D.done (doneTrue)
	roleChoices                 // D.choices (tells OpenAI's usage-only chunk)
	roleTokens                  // a report's tokens object (Cohere)
	roleBilled                  // a report's billed_units object (Cohere)
	roleEventType               // D.event_type (eventTypeIs)
	roleIterations              // a report's iterations array (Anthropic compaction)
	rolePromptDetails           // a report's prompt_tokens_details object
	roleComplDetails            // a report's completion_tokens_details object
	roleInDetails               // a report's input_tokens_details object
	roleOutDetails              // a report's output_tokens_details object
	roleCachedTokens            // cached_tokens in prompt_ or input_tokens_details
	roleReasoningTokens         // reasoning_tokens in completion_ or output_tokens_details
	roleEmbeddings              // a prediction's embeddings object (Vertex AI)
	roleStatistics              // embeddings.statistics
	roleTokenCount              // statistics.token_count
)

var roleNames = [...]struct {
	name string
	role keyRole
}{
	{"type", roleType}, {"done", roleDone}, {"choices", roleChoices}, {"tokens", roleTokens}, {"billed_units", roleBilled},
	{"event_type", roleEventType}, {"iterations", roleIterations},
	{"prompt_tokens_details", rolePromptDetails}, {"completion_tokens_details", roleComplDetails},
	{"input_tokens_details", roleInDetails}, {"output_tokens_details", roleOutDetails},
	{"cached_tokens", roleCachedTokens}, {"reasoning_tokens", roleReasoningTokens},
	{"embeddings", roleEmbeddings}, {"statistics", roleStatistics}, {"token_count", roleTokenCount},
}

// maxMemberLen is the longest name in members; the parser keeps at most
// this many bytes of a name.
const maxMemberLen = 32

// members and memberIndex: an open-addressing hash table of every name
// above (index 0 is empty), so that a name no table holds, the common
// case, usually costs one hash and no comparison.
var (
	members     = []member{{}}
	memberIndex [memberSlots]uint8
)

// nameWord returns the first eight bytes of b[:n] as a little-endian word
// (zero-padded when n < 8): with the length, it tells most names apart
// without comparing bytes. When b holds eight bytes it reads them in one
// load and masks off those past n.
func nameWord(b []byte, n int) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b) & wordMasks[min(uint(n), 8)]
	}
	var w uint64
	for i := n - 1; i >= 0; i-- {
		w = w<<8 | uint64(b[i])
	}
	return w
}

// wordMasks[n] keeps the low n bytes of a word.
var wordMasks = [9]uint64{0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFF, 0xFFFFFFFFFFFF, 0xFFFFFFFFFFFFFF, ^uint64(0)}

// memberSlots is the size of memberIndex: eight times the names or more,
// so that a name no table holds seldom meets one that it does.
const memberSlots = 512

func memberHash(w uint64, n int) uint {
	return uint((w^uint64(n))*0x9E3779B97F4A7C15>>55) & (memberSlots - 1)
}

// lookupMember returns what name means, or nil when it means nothing; w
// is nameWord of name.
func lookupMember(name []byte, w uint64) *member {
	if len(name) == 0 || len(name) > maxMemberLen {
		return nil
	}
	return lookupMemberFrom(memberHash(w, len(name)), name, w)
}

// lookupMemberFrom is lookupMember's probe from slot h, memberHash(w,
// len(name)). A name that is empty or longer than maxMemberLen matches no
// entry, so it needs no test of its own here.
func lookupMemberFrom(h uint, name []byte, w uint64) *member {
	for ; ; h = (h + 1) & (memberSlots - 1) {
		i := memberIndex[h]
		if i == 0 {
			return nil
		}
		if m := &members[i]; m.word == w && len(m.name) == len(name) && (len(name) <= 8 || m.name[8:] == string(name[8:])) {
			return m
		}
	}
}

// memberFor returns name's entry, adding it if new.
func memberFor(name string) *member {
	if len(name) > maxMemberLen {
		panic("usage: member name longer than maxMemberLen: " + name)
	}
	w := nameWord([]byte(name), len(name))
	if m := lookupMember([]byte(name), w); m != nil {
		return m
	}
	h := memberHash(w, len(name))
	for memberIndex[h] != 0 {
		h = (h + 1) & (memberSlots - 1)
	}
	if len(members) == 255 {
		panic("usage: too many member names")
	}
	memberIndex[h] = uint8(len(members))
	members = append(members, member{name: name, word: w, field: noField, rootField: noField})
	return &members[len(members)-1]
}

func init() {
	for _, m := range textMembers {
		memberFor(m).text = true
	}
	for s := slotXGroq; s < numSlots; s++ {
		if m := paths[s].member; m != "" {
			memberFor(m).row = s
		}
	}
	for _, fn := range fieldNames {
		if fn.style == styleOllama {
			memberFor(fn.name).rootField = fn.f
		} else {
			memberFor(fn.name).field = fn.f
		}
	}
	for _, r := range roleNames {
		memberFor(r.name).role = r.role
	}
}

// field is a counted field a report object can carry.
type field uint8

const (
	fPrompt           field = iota // prompt_tokens
	fCompletion                    // completion_tokens
	fInput                         // input_tokens
	fOutput                        // output_tokens
	fCacheCreate                   // cache_creation_input_tokens
	fCacheRead                     // cache_read_input_tokens
	fBInput                        // inputTokens
	fBOutput                       // outputTokens
	fBCacheRead                    // cacheReadInputTokens
	fBCacheWrite                   // cacheWriteInputTokens
	fBCacheReadAlias               // cacheReadInputTokenCount
	fBCacheWriteAlias              // cacheWriteInputTokenCount
	fGPrompt                       // promptTokenCount
	fGTool                         // toolUsePromptTokenCount
	fGCand                         // candidatesTokenCount
	fGThoughts                     // thoughtsTokenCount
	fOPromptEval                   // prompt_eval_count (document root)
	fOEval                         // eval_count (document root)
	fTokIn                         // tokens.input_tokens
	fTokOut                        // tokens.output_tokens
	fBillIn                        // billed_units.input_tokens
	fBillOut                       // billed_units.output_tokens
	fIMInput                       // inputTokenCount (invocationMetrics)
	fIMOutput                      // outputTokenCount (invocationMetrics)
	fTotal                         // total_tokens (xAI's rule)
	fDSHit                         // prompt_cache_hit_tokens (DeepSeek)
	fOACached                      // prompt_tokens_details.cached_tokens
	fOAReasoning                   // completion_tokens_details.reasoning_tokens
	fRCached                       // input_tokens_details.cached_tokens (Responses)
	fRReasoning                    // output_tokens_details.reasoning_tokens (Responses)
	fGCached                       // cachedContentTokenCount (Gemini)
	fITIn                          // total_input_tokens (Interactions)
	fITOut                         // total_output_tokens
	fITThought                     // total_thought_tokens
	fITTool                        // total_tool_use_tokens
	fITCached                      // total_cached_tokens
	fElIn                          // input_tokens of the iteration being read
	fElCacheCreate                 // cache_creation_input_tokens of it
	fElCacheRead                   // cache_read_input_tokens of it
	fElOut                         // output_tokens of it
	fItIn                          // the sums over compaction iterations: input_tokens,
	fItCacheCreate                 // cache_creation_input_tokens,
	fItCacheRead                   // cache_read_input_tokens,
	fItOut                         // output_tokens
	fElTokenCount                  // token_count of the prediction being read
	fVETokens                      // the sum of the predictions' token_count
	numFields
	noField field = 255
)

// fieldNames maps member names to fields, per style (the Cohere sub-objects
// tokens and billed_units are nodes of their own, see jsonScan.onKey).
// Every style but Ollama's records every name but Ollama's: the by-keys
// style is decided by the names present, and a Gemini report reads only
// its own fields.
var fieldNames = [...]struct {
	name  string
	f     field
	style style
}{
	{"prompt_tokens", fPrompt, styleByKeys},
	{"completion_tokens", fCompletion, styleByKeys},
	{"input_tokens", fInput, styleByKeys},
	{"output_tokens", fOutput, styleByKeys},
	{"cache_creation_input_tokens", fCacheCreate, styleByKeys},
	{"cache_read_input_tokens", fCacheRead, styleByKeys},
	{"inputTokens", fBInput, styleByKeys},
	{"outputTokens", fBOutput, styleByKeys},
	{"cacheReadInputTokens", fBCacheRead, styleByKeys},
	{"cacheWriteInputTokens", fBCacheWrite, styleByKeys},
	{"cacheReadInputTokenCount", fBCacheReadAlias, styleByKeys},
	{"cacheWriteInputTokenCount", fBCacheWriteAlias, styleByKeys},
	{"promptTokenCount", fGPrompt, styleGemini},
	{"toolUsePromptTokenCount", fGTool, styleGemini},
	{"candidatesTokenCount", fGCand, styleGemini},
	{"thoughtsTokenCount", fGThoughts, styleGemini},
	{"prompt_eval_count", fOPromptEval, styleOllama},
	{"eval_count", fOEval, styleOllama},
	{"inputTokenCount", fIMInput, styleInvocationMetrics},
	{"outputTokenCount", fIMOutput, styleInvocationMetrics},
	{"total_tokens", fTotal, styleByKeys},
	{"prompt_cache_hit_tokens", fDSHit, styleByKeys},
	{"cachedContentTokenCount", fGCached, styleGemini},
	{"total_input_tokens", fITIn, styleByKeys},
	{"total_output_tokens", fITOut, styleByKeys},
	{"total_thought_tokens", fITThought, styleByKeys},
	{"total_tool_use_tokens", fITTool, styleByKeys},
	{"total_cached_tokens", fITCached, styleByKeys},
}

// fieldState is what a counted field's value was.
type fieldState uint8

const (
	stAbsent fieldState = iota
	stNull
	stOK  // a plain non-negative integer literal that fits in int64
	stBad // any other value: rejects the whole report
)

// report is one candidate usage report: what the parser saw at one row of
// paths in one document. Only its reportState is cleared between
// documents: a value in v is read only where st says stOK.
type report struct {
	reportState
	v [numFields]int64
}

type reportState struct {
	obj       bool   // the path held a JSON object
	tokensObj bool   // member "tokens" holds an object (Cohere)
	billedObj bool   // member "billed_units" holds an object (Cohere)
	keys      uint64 // 1<<field for every counted member name present
	// iterBad: member iterations held an object of type compaction
	// with a malformed count (their counts are summed in fIt…).
	iterBad bool
	st      [numFields]fieldState
}

func (r *report) has(f field) bool { return r.st[f] == stOK || r.st[f] == stBad }

// kept is one combined value: one per counted field per style, and one
// per breakdown field a style reads beside its counted fields; last wins.
type kept uint8

const (
	kOAIn kept = iota
	kOAOut
	kANIn
	kANCacheC
	kANCacheR
	kANOut
	kANItIn     // the sums over compaction iterations (README §4.0 of
	kANItCacheC // testdata/usage): added to the top level's
	kANItCacheR
	kANItOut
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
	kITIn
	kITTool
	kITOut
	kITThought
	kVEIn
	// breakdown fields that are not counted fields: they are inside the
	// counted ones already.
	kOACached
	kOAReasoning
	kANCachedDetail
	kANReasoningDetail
	kGECached
	kITCached
	numKept
)

// keptCounts says what a kept value adds to: Usage.InputTokens (in),
// Usage.OutputTokens (out), or neither (a breakdown field only).
const (
	toNone uint8 = iota
	toIn
	toOut
)

var keptCounts = [numKept]uint8{
	kOAIn: toIn, kOAOut: toOut, kANIn: toIn, kANCacheC: toIn, kANCacheR: toIn, kANOut: toOut,
	kANItIn: toIn, kANItCacheC: toIn, kANItCacheR: toIn, kANItOut: toOut,
	kBRIn: toIn, kBRCacheR: toIn, kBRCacheW: toIn, kBROut: toOut, kCOIn: toIn, kCOOut: toOut,
	kGEPrompt: toIn, kGETool: toIn, kGECand: toOut, kGEThoughts: toOut, kOLIn: toIn, kOLOut: toOut,
	kITIn: toIn, kITTool: toIn, kITOut: toOut, kITThought: toOut, kVEIn: toIn,
}

// keptKind says which breakdown field of Usage a kept value is part of.
const (
	kindNone uint8 = iota
	kindCached
	kindCacheWrite
	kindReasoning
)

// keptKinds is the breakdown table (docs/cost.md, "What a response is charged"): cache reads, cache
// writes and reasoning, per style.
var keptKinds = [numKept]uint8{
	kANCacheR: kindCached, kANItCacheR: kindCached, kANCachedDetail: kindCached, kBRCacheR: kindCached,
	kOACached: kindCached, kGECached: kindCached, kITCached: kindCached,
	kANCacheC: kindCacheWrite, kANItCacheC: kindCacheWrite, kBRCacheW: kindCacheWrite,
	kOAReasoning: kindReasoning, kANReasoningDetail: kindReasoning, kGEThoughts: kindReasoning, kITThought: kindReasoning,
}

// pair binds a report's field to the kept value it overwrites.
type pair struct {
	f field
	k kept
}

// accumulator combines accepted reports (each overwrites the kept values
// it carries; reports are never summed) and the generated text of complete
// documents.
type accumulator struct {
	any   bool
	final bool
	have  uint64 // 1<<k for every kept value k held
	gen   int64
	v     [numKept]int64 // read only where have says so
}

// accumulator.have holds a bit per kept value.
var _ [64 - numKept]struct{}

// reset empties a for a new body.
func (a *accumulator) reset() { a.any, a.final, a.have, a.gen = false, false, 0, 0 }

func (a *accumulator) result() Result {
	r := Result{Reported: a.any, Final: a.final, GeneratedBytes: a.gen}
	if !a.any {
		return r
	}
	u := &r.Usage
	var cached, write, reasoning int64
	for m := a.have; m != 0; m &= m - 1 {
		k := bits.TrailingZeros64(m)
		v := a.v[k]
		switch keptCounts[k] {
		case toIn:
			r.InputReported = true
			u.InputTokens = satAdd(u.InputTokens, v)
		case toOut:
			u.OutputTokens = satAdd(u.OutputTokens, v)
		}
		switch keptKinds[k] {
		case kindCached:
			cached = satAdd(cached, v)
		case kindCacheWrite:
			write = satAdd(write, v)
		case kindReasoning:
			reasoning = satAdd(reasoning, v)
		}
	}
	// The breakdown is inside the totals: a body that says otherwise is
	// held to them.
	u.CachedInputTokens = min(cached, u.InputTokens)
	u.CacheWriteTokens = min(write, u.InputTokens-u.CachedInputTokens)
	u.ReasoningTokens = min(reasoning, u.OutputTokens)
	return r
}

// commit accepts a report's fields unless any of them is malformed or none
// is present, and reports whether it did.
func (a *accumulator) commit(r *report, pairs ...pair) bool {
	n := 0
	for _, p := range pairs {
		switch r.st[p.f] {
		case stBad:
			return false
		case stOK:
			n++
		}
	}
	if n == 0 {
		return false
	}
	a.breakdown(r, pairs...)
	a.any = true
	return true
}

// breakdown keeps the valid values among fields of an accepted report; a
// malformed or absent one is passed over and rejects nothing.
func (a *accumulator) breakdown(r *report, pairs ...pair) {
	for _, p := range pairs {
		if r.st[p.f] == stOK {
			a.v[p.k] = r.v[p.f]
			a.have |= 1 << p.k
		}
	}
}

// xaiReasoning reports whether an OpenAI-style report is xAI's: its
// total_tokens is prompt + completion + reasoning with reasoning > 0, so
// reasoning is not inside completion_tokens.
func (r *report) xaiReasoning() bool {
	if r.st[fPrompt] != stOK || r.st[fCompletion] != stOK || r.st[fTotal] != stOK || r.st[fOAReasoning] != stOK {
		return false
	}
	p, c, x, t := r.v[fPrompt], r.v[fCompletion], r.v[fOAReasoning], r.v[fTotal]
	return x > 0 && t >= p && t-p >= c && t-p-c == x
}

// applyReport applies one report of the given style.
func (a *accumulator) applyReport(r *report, st style) bool {
	switch st {
	case styleGemini:
		if !r.obj || !a.commit(r, pair{fGPrompt, kGEPrompt}, pair{fGTool, kGETool}, pair{fGCand, kGECand}, pair{fGThoughts, kGEThoughts}) {
			return false
		}
		a.breakdown(r, pair{fGCached, kGECached})
		return true
	case styleOllama:
		return a.commit(r, pair{fOPromptEval, kOLIn}, pair{fOEval, kOLOut})
	case styleInvocationMetrics:
		return r.obj && a.commit(r, pair{fIMInput, kANIn}, pair{fBCacheWriteAlias, kANCacheC}, pair{fBCacheReadAlias, kANCacheR}, pair{fIMOutput, kANOut})
	case styleVertexEmbed:
		return r.obj && a.commit(r, pair{fVETokens, kVEIn})
	}
	if !r.obj {
		return false
	}
	switch {
	case r.tokensObj || r.billedObj:
		in, out := fBillIn, fBillOut
		if r.tokensObj && (r.has(fTokIn) || r.has(fTokOut)) {
			in, out = fTokIn, fTokOut
		}
		return a.commit(r, pair{in, kCOIn}, pair{out, kCOOut})
	case st == styleCohere:
		return false
	case r.keys&(1<<fBInput|1<<fBOutput) != 0:
		cr, cw := fBCacheRead, fBCacheWrite
		if r.st[cr] <= stNull {
			cr = fBCacheReadAlias
		}
		if r.st[cw] <= stNull {
			cw = fBCacheWriteAlias
		}
		return a.commit(r, pair{fBInput, kBRIn}, pair{cr, kBRCacheR}, pair{cw, kBRCacheW}, pair{fBOutput, kBROut})
	case r.keys&(1<<fInput|1<<fOutput) != 0:
		// Server-side compaction: the billed counts are the top level's
		// (the final message's; after a model fallback, the answering
		// model's) plus every compaction iteration's, each kept apart so
		// that a stream's reports combine field by field.
		if r.iterBad || !a.commit(r, pair{fInput, kANIn}, pair{fCacheCreate, kANCacheC}, pair{fCacheRead, kANCacheR}, pair{fOutput, kANOut},
			pair{fItIn, kANItIn}, pair{fItCacheCreate, kANItCacheC}, pair{fItCacheRead, kANItCacheR}, pair{fItOut, kANItOut}) {
			return false
		}
		a.breakdown(r, pair{fRCached, kANCachedDetail}, pair{fRReasoning, kANReasoningDetail})
		return true
	case r.keys&(1<<fPrompt|1<<fCompletion) != 0:
		if !a.commit(r, pair{fPrompt, kOAIn}, pair{fCompletion, kOAOut}) {
			return false
		}
		cached := fOACached
		if r.st[cached] != stOK {
			cached = fDSHit
		}
		a.breakdown(r, pair{cached, kOACached}, pair{fOAReasoning, kOAReasoning})
		if r.xaiReasoning() {
			a.v[kOAOut] = r.v[fCompletion] + r.v[fOAReasoning] // ≤ total_tokens: no overflow
		}
		return true
	case r.keys&(1<<fITIn|1<<fITOut|1<<fITThought|1<<fITTool) != 0:
		if !a.commit(r, pair{fITIn, kITIn}, pair{fITTool, kITTool}, pair{fITOut, kITOut}, pair{fITThought, kITThought}) {
			return false
		}
		a.breakdown(r, pair{fITCached, kITCached})
		return true
	}
	return false
}

// holds reports whether document d meets row s's condition.
func (d *docState) holds(s slot) bool {
	p := &paths[s]
	switch p.when {
	case typeIs, eventTypeIs: // str[strType], str[strEventType]
		return d.str[p.when-typeIs].is(p.arg)
	case typePrefix:
		return d.str[strType].hasPrefix(p.arg)
	case doneTrue:
		return d.done
	}
	return true
}

// applyDoc applies one complete, valid JSON document: its generated text,
// then its reports in the order of paths (a row no member named holds
// nothing).
func (a *accumulator) applyDoc(d *docState) {
	a.gen = satAdd(a.gen, d.gen)
	if !d.rootObj {
		return
	}
	for m := d.dirty; m != 0; m &= m - 1 {
		s := slot(bits.TrailingZeros16(m))
		if d.holds(s) && a.applyReport(&d.slots[s], paths[s].style) && !paths[s].partial {
			a.final = true
		}
	}
}
