package request

import (
	"bytes"
	"net/http"
	"unicode/utf8"
)

// Estimate is an estimator (llmrate.WithEstimator) that reads the prompt
// and the output limit from the JSON request body: ⌈T / 4⌉ + M, at least
// 1, where T is the decoded UTF-8 bytes of the prompt's text members and M
// the largest output limit the request names (0 when none is valid); the
// members it counts are listed at llmrate.EstimateFromBody, which is this
// function. The body is read ahead as Model reads it, once for both. A
// body that is not one valid JSON object within its first MaxBody bytes
// (a larger body, one that fails to read, one whose coding cannot be
// decoded, or none) is estimated as llmrate.EstimateTokens estimates it:
// the declared Content-Length / 4, at least 1.
func Estimate(r *http.Request) int64 {
	rb := readAheadBody(r)
	if rb == nil || !rb.whole() {
		return lengthEstimate(r)
	}
	f := rb.facts(true)
	if !f.complete {
		return lengthEstimate(r)
	}
	return f.estimate()
}

// Input is Estimate's prompt part alone, ⌈T / 4⌉, without the output
// allowance the request names (max_tokens and the like), which a provider
// does not count toward its input limit. A body Estimate cannot read is
// estimated as Estimate estimates it: the declared Content-Length / 4, at
// least 1.
func Input(r *http.Request) int64 {
	rb := readAheadBody(r)
	if rb == nil || !rb.whole() {
		return lengthEstimate(r)
	}
	f := rb.facts(true)
	if !f.complete {
		return lengthEstimate(r)
	}
	var text int64
	for _, n := range f.text {
		text += n
	}
	return (text + 3) / 4
}

// lengthEstimate is llmrate.EstimateTokens, the estimate of a body that
// cannot be read: the declared Content-Length / 4, at least 1 (a chunked
// body, ContentLength -1, at the floor).
func lengthEstimate(r *http.Request) int64 { return max(1, r.ContentLength/4) }

// estimate is ⌈text / 4⌉ plus the largest output limit, at least 1,
// saturating at the int64 maximum.
func (f *bodyFacts) estimate() int64 {
	var text, out int64
	for _, n := range f.text {
		text += n // each is at most 3 × MaxBody
	}
	for _, n := range f.out {
		out = max(out, n)
	}
	est := (text + 3) / 4
	if est > 1<<63-1-out {
		return 1<<63 - 1
	}
	return max(1, est+out)
}

// The top-level members the estimate counts: text members, and output
// limits.
const (
	memMessages = iota
	memInput
	memSystem
	memInstructions
	memPrompt
	memContents
	memSystemInstruction
	numTextMembers
)

const (
	memMaxTokens = iota
	memMaxCompletionTokens
	memMaxOutputTokens
	memGenerationConfig
	numOutMembers
)

// memberName is the JSON name of each member the estimate counts.
func memberName(m int, text bool) string {
	if text {
		switch m {
		case memMessages:
			return "messages"
		case memInput:
			return "input"
		case memSystem:
			return "system"
		case memInstructions:
			return "instructions"
		case memPrompt:
			return "prompt"
		case memContents:
			return "contents"
		case memSystemInstruction:
			return "systemInstruction"
		}
		return ""
	}
	switch m {
	case memMaxTokens:
		return "max_tokens"
	case memMaxCompletionTokens:
		return "max_completion_tokens"
	case memMaxOutputTokens:
		return "max_output_tokens"
	case memGenerationConfig:
		return "generationConfig"
	}
	return ""
}

// estimateMember scans the value at b[i] of the top-level member named k
// (its JSON text) and records what it counts; end is where the value ends.
func (f *bodyFacts) estimateMember(b, k []byte, i int) (end int, ok bool) {
	for m := range numTextMembers {
		if nameIs(k, memberName(m, true), false) {
			var fn valueFunc
			switch m {
			case memMessages, memInput:
				fn = itemsText
			case memSystem:
				fn = partsText
			case memPrompt:
				fn = promptText
			case memContents:
				fn = contentsText
			case memSystemInstruction:
				fn = geminiContentText
			default: // memInstructions
				fn = stringText
			}
			end, f.text[m], ok = fn(b, i, 1)
			return end, ok
		}
	}
	for m := range numOutMembers {
		if nameIs(k, memberName(m, false), false) {
			fn := intValue
			if m == memGenerationConfig {
				fn = generationConfigOut
			}
			end, f.out[m], ok = fn(b, i, 1)
			return end, ok
		}
	}
	return skipValue(b, i, 1)
}

// A valueFunc scans the JSON value at b[i], a member or element of a
// container at depth, validating it as skipValue does, and returns where it
// ends, what it counts and whether it is valid and complete.
type valueFunc func(b []byte, i, depth int) (end int, n int64, ok bool)

// stringText counts a string's decoded bytes; any other value counts 0.
func stringText(b []byte, i, depth int) (int, int64, bool) {
	if i >= len(b) || b[i] != '"' {
		end, ok := skipValue(b, i, depth)
		return end, 0, ok
	}
	end, ok := skipString(b, i)
	if !ok {
		return end, 0, false
	}
	return end, decodedLen(b[i+1 : end-1]), true
}

// partsText counts a string, or the "text" strings of an array's objects
// (chat content parts, Anthropic blocks, Gemini parts).
func partsText(b []byte, i, depth int) (int, int64, bool) {
	if i < len(b) && b[i] == '[' {
		return sumArray(b, i, depth, partText)
	}
	return stringText(b, i, depth)
}

func partText(b []byte, i, depth int) (int, int64, bool) {
	return lastMember(b, i, depth, "text", stringText, 0)
}

// itemsText counts a string, or the content of an array's objects (chat
// and Anthropic messages, Responses input items) as partsText counts it.
func itemsText(b []byte, i, depth int) (int, int64, bool) {
	if i < len(b) && b[i] == '[' {
		return sumArray(b, i, depth, itemText)
	}
	return stringText(b, i, depth)
}

func itemText(b []byte, i, depth int) (int, int64, bool) {
	return lastMember(b, i, depth, "content", partsText, 0)
}

// promptText counts a string, or the strings of an array (legacy prompt).
func promptText(b []byte, i, depth int) (int, int64, bool) {
	if i < len(b) && b[i] == '[' {
		return sumArray(b, i, depth, stringText)
	}
	return stringText(b, i, depth)
}

// contentsText counts Gemini contents: an array of objects whose "parts"
// count as partsText counts them.
func contentsText(b []byte, i, depth int) (int, int64, bool) {
	if i < len(b) && b[i] == '[' {
		return sumArray(b, i, depth, geminiContentText)
	}
	end, ok := skipValue(b, i, depth)
	return end, 0, ok
}

func geminiContentText(b []byte, i, depth int) (int, int64, bool) {
	return lastMember(b, i, depth, "parts", partsText, 0)
}

// generationConfigOut is Gemini's generationConfig.maxOutputTokens, -1 when
// absent or invalid.
func generationConfigOut(b []byte, i, depth int) (int, int64, bool) {
	return lastMember(b, i, depth, "maxOutputTokens", intValue, -1)
}

// intValue is a JSON number without fraction or exponent, in [0, 2⁶³-1];
// anything else counts -1 ("-0" is 0, as strconv.ParseInt reads it).
func intValue(b []byte, i, depth int) (int, int64, bool) {
	end, ok := skipValue(b, i, depth)
	if !ok {
		return end, -1, false
	}
	d := b[i:end]
	neg := d[0] == '-'
	if neg {
		d = d[1:]
	}
	if len(d) == 0 || d[0] < '0' || d[0] > '9' || len(d) > 19 {
		return end, -1, true
	}
	var n uint64
	for _, c := range d {
		if c < '0' || c > '9' {
			return end, -1, true // a fraction or an exponent
		}
		n = n*10 + uint64(c-'0') // 19 digits fit in a uint64
	}
	switch {
	case n > 1<<63-1:
		return end, -1, true
	case neg && n != 0:
		return end, -1, true
	}
	return end, int64(n), true
}

// sumArray sums fn over the elements of the array at b[i].
func sumArray(b []byte, i, depth int, fn valueFunc) (int, int64, bool) {
	if depth++; depth > maxDepth {
		return i, 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, 0, true
	}
	var sum int64
	for {
		end, n, ok := fn(b, i, depth)
		if !ok {
			return end, 0, false
		}
		sum += n // at most 3 × MaxBody in all
		var more bool
		if i, more, ok = afterElement(b, end, ']'); !ok || !more {
			return i, sum, ok
		}
	}
}

// lastMember returns what fn counts of the last member named name of the
// object at b[i]: none when there is no such member, or b[i] is not an
// object.
func lastMember(b []byte, i, depth int, name string, fn valueFunc, none int64) (int, int64, bool) {
	if i >= len(b) || b[i] != '{' {
		end, ok := skipValue(b, i, depth)
		return end, none, ok
	}
	if depth++; depth > maxDepth {
		return i, none, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, none, true
	}
	n := none
	for {
		kEnd, v, ok := skipMemberName(b, i)
		if !ok {
			return v, none, false
		}
		var end int
		if nameIs(b[i:kEnd], name, false) {
			end, n, ok = fn(b, v, depth)
		} else {
			end, ok = skipValue(b, v, depth)
		}
		if !ok {
			return end, none, false
		}
		var more bool
		if i, more, ok = afterElement(b, end, '}'); !ok || !more {
			return i, n, ok
		}
	}
}

// decodedLen returns the length of a valid JSON string's content s once
// decoded as encoding/json decodes it: escapes resolved (a lone surrogate
// as U+FFFD), each byte of invalid UTF-8 as U+FFFD (3 bytes).
func decodedLen(s []byte) int64 {
	var n int64
	for {
		j := bytes.IndexByte(s, '\\')
		run := s
		if j >= 0 {
			run = s[:j]
		}
		n += utf8Len(run)
		if j < 0 {
			return n
		}
		r, w := unescape(s[j:])
		n += int64(utf8.RuneLen(r))
		s = s[j+w:]
	}
}

// utf8Len is the length of s with each invalid byte replaced by U+FFFD.
func utf8Len(s []byte) int64 {
	if utf8.Valid(s) {
		return int64(len(s))
	}
	var n int64
	for len(s) > 0 {
		_, size := utf8.DecodeRune(s)
		if size == 1 && s[0] >= utf8.RuneSelf {
			n += 3
		} else {
			n += int64(size)
		}
		s = s[size:]
	}
	return n
}
