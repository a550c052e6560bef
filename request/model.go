package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"
)

// ErrAmbiguousModel is returned by Model for a body whose top-level members
// name the model more than once with different values.
var ErrAmbiguousModel = errors.New("request: the request names its model more than once, with different values")

// Model returns the model r names, as LLM APIs carry it: the top-level
// "model" string of a JSON request body (its name matched
// case-insensitively, as a Go upstream decoding into a struct matches it),
// else, for Gemini-style paths
// (/v1beta/models/gemini-2.5-flash:streamGenerateContent), the path
// segment after "models/" up to ":". A request that names no model this
// way gives "", nil; a body whose top-level members name it more than once
// with different values gives ErrAmbiguousModel. The body is read ahead,
// not consumed (see the package doc); the rules for a body larger than
// MaxBody, chunked or encoded are llmrate.ModelFromBody's, which is this
// function with llmrate.ErrAmbiguousModel for the ambiguity.
func Model(r *http.Request) (string, error) {
	if rb := readAheadBody(r); rb != nil {
		f := rb.facts(false)
		switch {
		case rb.whole() && !f.complete, !rb.whole() && !rb.prefix():
		case f.ambiguous:
			return "", ErrAmbiguousModel
		default:
			if m := modelString(f.model); m != "" {
				return m, nil
			}
		}
	}
	if r.URL != nil {
		return modelInPath(r.URL.Path), nil
	}
	return "", nil
}

// Prepare reads r's body ahead and scans it for all that Model, Estimate
// and Input read, so that a caller asking for the model and an estimate of
// one request scans its body once (Model alone scans only for the model;
// an estimate's scan serves the model too). A body Estimate cannot read
// whole (larger than MaxBody, say) is read ahead but not scanned.
func Prepare(r *http.Request) {
	if rb := readAheadBody(r); rb != nil && rb.whole() {
		rb.facts(true)
	}
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
