// Package usageref is an obviously-correct reference, for tests only, for
// the usage rules of testdata/usage/README.md (at the module root) and the
// generated-text count of the charge rule, written on encoding/json: it
// decodes whole documents into maps and reads the fixed paths, and walks
// their tokens for generated text. The streaming scanner of package usage
// must agree with it on every input; it shares no code with it.
package usageref

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

var plainInt = regexp.MustCompile(`^[0-9]+$`)

type refField struct {
	present bool // present and not null
	bad     bool
	v       int64
}

func refRead(m map[string]any, name string) refField {
	v, ok := m[name]
	if !ok || v == nil {
		return refField{}
	}
	n, isNum := v.(json.Number)
	if !isNum || !plainInt.MatchString(string(n)) {
		return refField{present: true, bad: true}
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return refField{present: true, bad: true}
	}
	return refField{present: true, v: i}
}

type refAcc struct {
	any   bool
	final bool             // a report other than Anthropic's message_start was accepted
	kept  map[string]int64 // "style.field" → value
	gen   int64            // generated text bytes
}

// refKept says, for every kept "style.field", what it adds to ("in",
// "out", or "" for a breakdown-only field) and which breakdown field of
// the breakdown (docs/cost.md "What a response is charged") it is part of ("cached", "write", "reasoning" or "").
var refKept = map[string]struct{ adds, kind string }{
	"oa.in": {"in", ""}, "oa.out": {"out", ""}, "oa.cached": {"", "cached"}, "oa.reasoning": {"", "reasoning"},
	"an.in": {"in", ""}, "an.cc": {"in", "write"}, "an.cr": {"in", "cached"}, "an.out": {"out", ""},
	"an.it.in": {"in", ""}, "an.it.cc": {"in", "write"}, "an.it.cr": {"in", "cached"}, "an.it.out": {"out", ""},
	"an.details.cached": {"", "cached"}, "an.details.reasoning": {"", "reasoning"},
	"br.in": {"in", ""}, "br.cr": {"in", "cached"}, "br.cw": {"in", "write"}, "br.out": {"out", ""},
	"co.in": {"in", ""}, "co.out": {"out", ""},
	"ge.p": {"in", ""}, "ge.t": {"in", ""}, "ge.c": {"out", ""}, "ge.th": {"out", "reasoning"}, "ge.cached": {"", "cached"},
	"ol.in": {"in", ""}, "ol.out": {"out", ""},
	"it.in": {"in", ""}, "it.tool": {"in", ""}, "it.out": {"out", ""}, "it.thought": {"out", "reasoning"}, "it.cached": {"", "cached"},
	"ve.in": {"in", ""},
}

// Result is what the reference finds in a body.
type Result struct {
	Input, Output int64 // the reported usage (0 when not reported)
	// The breakdown (docs/cost.md "What a response is charged"): cache reads and writes inside Input,
	// reasoning inside Output.
	Cached, CacheWrite, Reasoning int64
	Reported                      bool   // a report was accepted
	InputReported                 bool   // an accepted report carried an input field
	Final                         bool   // a report other than Anthropic's message_start was accepted
	Gen                           int64  // decoded bytes of generated text in complete documents
	Pending                       bool   // an SSE body that ends inside an event, an event stream inside a message
	Exception                     string // an event stream's first exception or error message type
}

// commit applies one report: fields are its counted fields by kept name;
// extra its breakdown-only fields, kept when the report is accepted and
// they are valid, never rejecting it.
func (a *refAcc) commit(fields, extra map[string]refField) bool {
	n := 0
	for _, f := range fields {
		if f.bad {
			return false
		}
		if f.present {
			n++
		}
	}
	if n == 0 {
		return false
	}
	for k, f := range fields {
		if f.present {
			a.kept[k] = f.v
		}
	}
	for k, f := range extra {
		if f.present && !f.bad {
			a.kept[k] = f.v
		}
	}
	a.any = true
	return true
}

func satSum(x, y int64) int64 {
	if s := x + y; s >= x {
		return s
	}
	return 1<<63 - 1
}

// iterationSums returns the sums of Anthropic's counted fields over the
// iterations of type compaction (the billed figures are the top level plus
// these: message and fallback_message are the top level itself), whether
// there was one, and whether one of them had a malformed count.
func iterationSums(r map[string]any) (sums map[string]refField, seen, bad bool) {
	sums = map[string]refField{}
	its, ok := r["iterations"].([]any)
	if !ok {
		return sums, false, false
	}
	for _, e := range its {
		el, ok := asObj(e)
		if !ok {
			continue
		}
		if t, _ := el["type"].(string); t != "compaction" {
			continue
		}
		seen = true
		for _, name := range []string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"} {
			f := refRead(el, name)
			if f.bad {
				bad = true
			}
			if f.present {
				s := sums[name]
				s.present, s.v = true, satSum(s.v, f.v)
				sums[name] = s
			}
		}
	}
	return sums, seen, bad
}

// xaiOutput returns completion + reasoning when the report's total_tokens
// is prompt + completion + reasoning (reasoning > 0), else completion.
func xaiOutput(r map[string]any, completion refField) refField {
	det, _ := asObj(r["completion_tokens_details"])
	p, x, t := refRead(r, "prompt_tokens"), refRead(det, "reasoning_tokens"), refRead(r, "total_tokens")
	for _, f := range []refField{p, completion, x, t} {
		if !f.present || f.bad {
			return completion
		}
	}
	sum := new(big.Int).Add(big.NewInt(p.v), big.NewInt(completion.v))
	sum.Add(sum, big.NewInt(x.v))
	if x.v == 0 || sum.Cmp(big.NewInt(t.v)) != 0 {
		return completion
	}
	return refField{present: true, v: completion.v + x.v}
}

func asObj(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	return m, ok
}

func (a *refAcc) report(v any, cohereOnly bool) bool {
	r, ok := asObj(v)
	if !ok {
		return false
	}
	tok, tokOK := asObj(r["tokens"])
	bill, billOK := asObj(r["billed_units"])
	has := func(k string) bool { _, ok := r[k]; return ok }
	switch {
	case tokOK || billOK:
		src := bill
		if tokOK {
			in, out := refRead(tok, "input_tokens"), refRead(tok, "output_tokens")
			if in.present || out.present {
				src = tok
			}
		}
		if src == nil {
			src = map[string]any{}
		}
		return a.commit(map[string]refField{"co.in": refRead(src, "input_tokens"), "co.out": refRead(src, "output_tokens")}, nil)
	case cohereOnly:
	case has("inputTokens") || has("outputTokens"):
		cr := refRead(r, "cacheReadInputTokens")
		if !cr.present {
			cr = refRead(r, "cacheReadInputTokenCount")
		}
		cw := refRead(r, "cacheWriteInputTokens")
		if !cw.present {
			cw = refRead(r, "cacheWriteInputTokenCount")
		}
		return a.commit(map[string]refField{"br.in": refRead(r, "inputTokens"), "br.cr": cr, "br.cw": cw, "br.out": refRead(r, "outputTokens")}, nil)
	case has("input_tokens") || has("output_tokens"):
		in, cc, cr, out := refRead(r, "input_tokens"), refRead(r, "cache_creation_input_tokens"), refRead(r, "cache_read_input_tokens"), refRead(r, "output_tokens")
		sums, _, bad := iterationSums(r)
		if bad {
			return false
		}
		inDet, _ := asObj(r["input_tokens_details"])
		outDet, _ := asObj(r["output_tokens_details"])
		return a.commit(map[string]refField{"an.in": in, "an.cc": cc, "an.cr": cr, "an.out": out,
			"an.it.in": sums["input_tokens"], "an.it.cc": sums["cache_creation_input_tokens"], "an.it.cr": sums["cache_read_input_tokens"], "an.it.out": sums["output_tokens"]},
			map[string]refField{"an.details.cached": refRead(inDet, "cached_tokens"), "an.details.reasoning": refRead(outDet, "reasoning_tokens")})
	case has("prompt_tokens") || has("completion_tokens"):
		c := refRead(r, "completion_tokens")
		if c.bad {
			return false
		}
		pDet, _ := asObj(r["prompt_tokens_details"])
		cDet, _ := asObj(r["completion_tokens_details"])
		cached := refRead(pDet, "cached_tokens")
		if !cached.present || cached.bad {
			cached = refRead(r, "prompt_cache_hit_tokens") // DeepSeek
		}
		return a.commit(map[string]refField{"oa.in": refRead(r, "prompt_tokens"), "oa.out": xaiOutput(r, c)},
			map[string]refField{"oa.cached": cached, "oa.reasoning": refRead(cDet, "reasoning_tokens")})
	case has("total_input_tokens") || has("total_output_tokens") || has("total_thought_tokens") || has("total_tool_use_tokens"):
		return a.commit(map[string]refField{"it.in": refRead(r, "total_input_tokens"), "it.tool": refRead(r, "total_tool_use_tokens"), "it.out": refRead(r, "total_output_tokens"), "it.thought": refRead(r, "total_thought_tokens")},
			map[string]refField{"it.cached": refRead(r, "total_cached_tokens")})
	}
	return false
}

func (a *refAcc) doc(data []byte) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return
	}
	if _, err := dec.Token(); err == nil { // trailing garbage: not one JSON text
		return
	}
	if !json.Valid(data) {
		return
	}
	a.gen += refGen(data)
	d, ok := asObj(v)
	if !ok {
		return
	}
	final := func(accepted bool) {
		a.final = a.final || accepted
	}
	if xg, ok := asObj(d["x_groq"]); ok {
		final(a.report(xg["usage"], false))
	}
	final(a.report(d["usage"], false))
	typ, _ := d["type"].(string)
	if typ == "message_start" {
		if m, ok := asObj(d["message"]); ok {
			a.report(m["usage"], false) // partial by definition
		}
	}
	if len(typ) >= 9 && typ[:9] == "response." {
		if m, ok := asObj(d["response"]); ok {
			final(a.report(m["usage"], false))
		}
	}
	if typ == "message-end" {
		if m, ok := asObj(d["delta"]); ok {
			final(a.report(m["usage"], false))
		}
	}
	final(a.report(d["meta"], true))
	if g, ok := asObj(d["usageMetadata"]); ok {
		final(a.commit(map[string]refField{"ge.p": refRead(g, "promptTokenCount"), "ge.t": refRead(g, "toolUsePromptTokenCount"), "ge.c": refRead(g, "candidatesTokenCount"), "ge.th": refRead(g, "thoughtsTokenCount")},
			map[string]refField{"ge.cached": refRead(g, "cachedContentTokenCount")}))
	}
	if done, _ := d["done"].(bool); done {
		final(a.commit(map[string]refField{"ol.in": refRead(d, "prompt_eval_count"), "ol.out": refRead(d, "eval_count")}, nil))
	}
	// Bedrock InvokeModel: the same tokens as the model's own
	// Anthropic-style report, restated; they replace it, never add to it.
	if m, ok := asObj(d["amazon-bedrock-invocationMetrics"]); ok {
		final(a.commit(map[string]refField{"an.in": refRead(m, "inputTokenCount"), "an.cc": refRead(m, "cacheWriteInputTokenCount"), "an.cr": refRead(m, "cacheReadInputTokenCount"), "an.out": refRead(m, "outputTokenCount")}, nil))
	}
	// Gemini Interactions, streamed: the completed interaction's usage.
	if et, _ := d["event_type"].(string); et == "interaction.completed" {
		if m, ok := asObj(d["interaction"]); ok {
			final(a.report(m["usage"], false))
		}
	}
	// Vertex AI text embeddings: input is the predictions' token counts.
	if preds, ok := d["predictions"].([]any); ok {
		var sum refField
		for _, p := range preds {
			el, _ := asObj(p)
			emb, _ := asObj(el["embeddings"])
			stats, _ := asObj(emb["statistics"])
			f := refRead(stats, "token_count")
			if f.bad {
				sum.bad = true
			}
			if f.present {
				sum.present, sum.v = true, satSum(sum.v, f.v)
			}
		}
		final(a.commit(map[string]refField{"ve.in": sum}, nil))
	}
}

// refTextNames are the members whose string values are generated text.
var refTextNames = map[string]bool{
	"content": true, "text": true, "partial_json": true, "thinking": true, "arguments": true,
	"delta": true, "reasoning_content": true, "reasoning": true, "refusal": true, "response": true,
}

// refGen returns the decoded bytes of the string values of members named
// in refTextNames, at any depth, of one valid JSON document. It walks
// encoding/json's tokens, so a repeated member counts every time.
func refGen(data []byte) int64 {
	type frame struct{ obj, key bool } // key: an object's next token is a member name
	dec := json.NewDecoder(bytes.NewReader(data))
	// A valid number beyond float64's range (1e700) is a token, not an
	// error that ends the walk early, as doc's decoder reads it.
	dec.UseNumber()
	var stack []frame
	var n int64
	named := false
	afterValue := func() {
		named = false
		if t := len(stack) - 1; t >= 0 && stack[t].obj {
			stack[t].key = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].obj && stack[top].key {
			if name, ok := tok.(string); ok {
				named, stack[top].key = refTextNames[name], false
				continue
			}
			stack = stack[:top] // '}'
			afterValue()
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, frame{obj: v == '{', key: true})
				named = false
				continue
			default: // ']'
				stack = stack[:top]
			}
		case string:
			if named {
				n += int64(len(v))
			}
		}
		afterValue()
	}
}

func (a *refAcc) result() Result {
	r := Result{Reported: a.any, Final: a.final, Gen: a.gen}
	if !a.any {
		return r
	}
	for k, v := range a.kept {
		switch refKept[k].adds {
		case "in":
			r.InputReported = true
			r.Input = satSum(r.Input, v)
		case "out":
			r.Output = satSum(r.Output, v)
		}
		switch refKept[k].kind {
		case "cached":
			r.Cached = satSum(r.Cached, v)
		case "write":
			r.CacheWrite = satSum(r.CacheWrite, v)
		case "reasoning":
			r.Reasoning = satSum(r.Reasoning, v)
		}
	}
	// A breakdown is part of its total, whatever a body says.
	r.Cached = min(r.Cached, r.Input)
	r.CacheWrite = min(r.CacheWrite, r.Input-r.Cached)
	r.Reasoning = min(r.Reasoning, r.Output)
	return r
}

func newRef() *refAcc { return &refAcc{kept: map[string]int64{}} }

// JSON extracts usage from an application/json body. A top-level
// array is a sequence of documents; complete elements before a break in the
// array count (the README leaves this open; llmrate uses them).
func JSON(body []byte) Result {
	a := newRef()
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(body))
		if _, err := dec.Token(); err != nil {
			return a.result()
		}
		for dec.More() {
			var el json.RawMessage
			if dec.Decode(&el) != nil {
				break
			}
			a.doc(el)
		}
		return a.result()
	}
	a.doc(body)
	return a.result()
}

// SSE extracts usage from a text/event-stream body, framing it as the
// WHATWG algorithm says, on the whole body at once.
func SSE(body []byte) Result {
	a := newRef()
	body = bytes.TrimPrefix(body, []byte("\xEF\xBB\xBF"))
	var lines [][]byte
	for len(body) > 0 {
		i := bytes.IndexAny(body, "\r\n")
		if i < 0 {
			lines = append(lines, body) // unterminated last line: never dispatches
			break
		}
		lines = append(lines, body[:i])
		if body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n' {
			i++
		}
		body = body[i+1:]
		if len(body) == 0 {
			lines = append(lines, nil) // marker: the last line was terminated
		}
	}
	var data []byte
	hasData := false
	for i, line := range lines {
		terminated := i < len(lines)-1
		if !terminated {
			break
		}
		if len(line) == 0 {
			if hasData {
				a.doc(data)
			}
			data, hasData = data[:0], false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		if string(field) == "data" {
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		}
	}
	r := a.result()
	r.Pending = hasData || len(lines) > 0 && len(lines[len(lines)-1]) > 0
	return r
}

// NDJSON extracts usage from an application/x-ndjson body.
func NDJSON(body []byte) Result {
	a := newRef()
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(line) > 0 {
			a.doc(line)
		}
	}
	return a.result()
}

// EventStream extracts usage from an application/vnd.amazon.eventstream
// body: every whole message is decoded (CRCs checked) by the AWS SDK's
// decoder; an "event" message's payload is a document, a "chunk" event's
// document its base64 "bytes"; exception and error messages are never
// documents. A body ending inside a message, or at a message the SDK
// rejects, is Pending.
func EventStream(body []byte) Result {
	a := newRef()
	dec := eventstream.NewDecoder()
	exception := ""
	for len(body) > 0 {
		if len(body) < 12 || int(binary.BigEndian.Uint32(body)) > len(body) {
			break
		}
		n := int(binary.BigEndian.Uint32(body))
		m, err := dec.Decode(bytes.NewReader(body[:n]), nil)
		if err != nil {
			break
		}
		body = body[n:]
		str := func(name string) string {
			v, _ := m.Headers.Get(name).(eventstream.StringValue)
			return string(v)
		}
		switch str(":message-type") {
		case "event":
			if str(":event-type") != "chunk" {
				a.doc(m.Payload)
				continue
			}
			var c struct{ Bytes []byte }
			if json.Unmarshal(m.Payload, &c) == nil && len(c.Bytes) > 0 {
				a.doc(c.Bytes)
			}
		case "exception", "error":
			if exception == "" {
				exception = str(":exception-type") + str(":error-code")
				if exception == "" {
					exception = str(":message-type")
				}
			}
		}
	}
	r := a.result()
	r.Pending, r.Exception = len(body) > 0, exception
	return r
}

// Body reads body as its Content-Type says (an already decoded body).
func Body(ct string, body []byte) Result {
	switch strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0])) {
	case "application/json":
		return JSON(body)
	case "text/event-stream":
		return SSE(body)
	case "application/x-ndjson":
		return NDJSON(body)
	case "application/vnd.amazon.eventstream":
		return EventStream(body)
	}
	return Result{}
}
