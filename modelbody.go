package llmrate

import (
	"errors"
	"net/http"

	"github.com/llmrate/llmrate/request"
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

// modelFromBody is request.Model, which reads the body and the path, with
// ErrAmbiguousModel for the ambiguity.
func modelFromBody(r *http.Request) (string, error) {
	m, err := request.Model(r)
	if err != nil { // request.ErrAmbiguousModel, its only error
		return "", ErrAmbiguousModel
	}
	return m, nil
}

// MaxModelBody is request.MaxBody, the bound package request reads ahead
// to (an array of negative length does not compile).
var (
	_ [MaxModelBody - request.MaxBody]struct{}
	_ [request.MaxBody - MaxModelBody]struct{}
)
