package llmrate_test

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"

	"github.com/llmrate/llmrate"
)

// This file is an obviously-correct reference for the usage rules of
// testdata/usage/README.md, written on encoding/json: it decodes whole
// documents into maps and reads the fixed paths. The streaming scanner must
// agree with it on every input.

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
	any  bool
	kept map[string]int64 // "style.field" → value
	out  map[string]bool
}

// commit applies one report: names are "kept-name=field" pairs read from m
// (or from sub, for Cohere); output marks the output fields.
func (a *refAcc) commit(fields map[string]refField, output map[string]bool) {
	n := 0
	for _, f := range fields {
		if f.bad {
			return
		}
		if f.present {
			n++
		}
	}
	if n == 0 {
		return
	}
	for k, f := range fields {
		if f.present {
			a.kept[k] = f.v
			a.out[k] = output[k]
		}
	}
	a.any = true
}

func asObj(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	return m, ok
}

func (a *refAcc) report(v any, cohereOnly bool) {
	r, ok := asObj(v)
	if !ok {
		return
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
		a.commit(map[string]refField{"co.in": refRead(src, "input_tokens"), "co.out": refRead(src, "output_tokens")}, map[string]bool{"co.out": true})
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
		a.commit(map[string]refField{"br.in": refRead(r, "inputTokens"), "br.cr": cr, "br.cw": cw, "br.out": refRead(r, "outputTokens")}, map[string]bool{"br.out": true})
	case has("input_tokens") || has("output_tokens"):
		a.commit(map[string]refField{"an.in": refRead(r, "input_tokens"), "an.cc": refRead(r, "cache_creation_input_tokens"), "an.cr": refRead(r, "cache_read_input_tokens"), "an.out": refRead(r, "output_tokens")}, map[string]bool{"an.out": true})
	case has("prompt_tokens") || has("completion_tokens"):
		a.commit(map[string]refField{"oa.in": refRead(r, "prompt_tokens"), "oa.out": refRead(r, "completion_tokens")}, map[string]bool{"oa.out": true})
	}
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
	d, ok := asObj(v)
	if !ok {
		return
	}
	if xg, ok := asObj(d["x_groq"]); ok {
		a.report(xg["usage"], false)
	}
	a.report(d["usage"], false)
	typ, _ := d["type"].(string)
	if typ == "message_start" {
		if m, ok := asObj(d["message"]); ok {
			a.report(m["usage"], false)
		}
	}
	if len(typ) >= 9 && typ[:9] == "response." {
		if m, ok := asObj(d["response"]); ok {
			a.report(m["usage"], false)
		}
	}
	if typ == "message-end" {
		if m, ok := asObj(d["delta"]); ok {
			a.report(m["usage"], false)
		}
	}
	a.report(d["meta"], true)
	if g, ok := asObj(d["usageMetadata"]); ok {
		a.commit(map[string]refField{"ge.p": refRead(g, "promptTokenCount"), "ge.t": refRead(g, "toolUsePromptTokenCount"), "ge.c": refRead(g, "candidatesTokenCount"), "ge.th": refRead(g, "thoughtsTokenCount")}, map[string]bool{"ge.c": true, "ge.th": true})
	}
	if done, _ := d["done"].(bool); done {
		a.commit(map[string]refField{"ol.in": refRead(d, "prompt_eval_count"), "ol.out": refRead(d, "eval_count")}, map[string]bool{"ol.out": true})
	}
}

func (a *refAcc) result() (llmrate.Usage, bool) {
	if !a.any {
		return llmrate.Usage{}, false
	}
	var u llmrate.Usage
	sat := func(x, y int64) int64 {
		if s := x + y; s >= x {
			return s
		}
		return 1<<63 - 1
	}
	for k, v := range a.kept {
		if a.out[k] {
			u.OutputTokens = sat(u.OutputTokens, v)
		} else {
			u.InputTokens = sat(u.InputTokens, v)
		}
	}
	return u, true
}

func newRef() *refAcc { return &refAcc{kept: map[string]int64{}, out: map[string]bool{}} }

// refJSONBody extracts usage from an application/json body. A top-level
// array is a sequence of documents; complete elements before a break in the
// array count (the README leaves this open; llmrate uses them).
func refJSONBody(body []byte) (llmrate.Usage, bool) {
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

// refSSEBody extracts usage from a text/event-stream body, framing it as the
// WHATWG algorithm says, on the whole body at once.
func refSSEBody(body []byte) (llmrate.Usage, bool) {
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
	return a.result()
}

// refNDJSONBody extracts usage from an application/x-ndjson body.
func refNDJSONBody(body []byte) (llmrate.Usage, bool) {
	a := newRef()
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(line) > 0 {
			a.doc(line)
		}
	}
	return a.result()
}
