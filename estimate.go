package llmrate

import (
	"net/http"

	"github.com/llmrate/llmrate/request"
)

// EstimateTokens is the default estimator: the declared Content-Length
// divided by 4, never less than 1. A request with no declared length
// (chunked, or ContentLength -1) estimates at the floor of 1.
func EstimateTokens(r *http.Request) int64 {
	return max(1, r.ContentLength/4)
}

// EstimateFromBody returns an estimator for WithEstimator that reads the
// prompt and the output limit from the JSON request body: ⌈T / 4⌉ + M,
// at least 1, where
//
//   - T is the bytes of the prompt's text, as decoded UTF-8 (escapes
//     resolved, invalid bytes as U+FFFD, as encoding/json decodes them): the
//     string values of chat and Anthropic "messages"[].content (a string,
//     or its parts' "text"), Anthropic "system" (a string, or its blocks'
//     "text"), Responses "instructions" (a string) and "input" (a string,
//     or its items' content as for messages), legacy "prompt" (a string, or
//     the strings of an array), Gemini "systemInstruction".parts[].text and
//     "contents"[].parts[].text;
//   - M is the output the request may generate: the largest of
//     "max_tokens", "max_completion_tokens", "max_output_tokens" and
//     "generationConfig"."maxOutputTokens" that is a valid non-negative
//     integer (a JSON number without fraction or exponent, within int64);
//     0 when none is.
//
// Member names match exactly (case included); of duplicate members the
// last one counts, as encoding/json decodes them.
//
// The body is read ahead as ModelFromBody reads it, and once for both when
// both are configured: at most the first MaxModelBody bytes, not consumed
// (the next handler still reads every byte, with the request's
// Content-Length). A body that is not one valid JSON object within its
// first MaxModelBody bytes (a larger body, one that fails to read, or
// none) is estimated as EstimateTokens estimates it: Content-Length / 4,
// at least 1. The reconcile corrects the estimate, as always. A body with
// a Content-Encoding is read decoded, as ModelFromBody reads it; one whose
// coding cannot be decoded is estimated as EstimateTokens does.
//
// A request naming a large output limit is debited that much at
// admission: it is refused when a bucket cannot hold it (NeverFits when
// the limit exceeds a whole bucket), where the default estimate would have
// admitted it and charged its usage afterwards. A response without usage
// (an upstream error, say) is charged the estimate, as always: here the
// prompt and the whole output limit.
func EstimateFromBody() func(*http.Request) int64 { return request.Estimate }

// InputEstimator returns the input estimate that goes with estimator, for
// the input tokens meters of Limits.Windows (AdmitRequest.InputTokens): for
// EstimateFromBody(), the prompt part of its estimate alone, without the
// output allowance the request names (max_tokens and the like), which a
// provider does not count toward its input limit; for any other estimator
// (nil included), estimator itself. The middleware debits its input meters
// so; upstream.Transport holds its keys' input meters the same way.
func InputEstimator(estimator func(*http.Request) int64) func(*http.Request) int64 {
	if sameFunc(estimator, request.Estimate) {
		return request.Input
	}
	return estimator
}

// inputFromBody is the middleware's input estimate when the estimator is
// EstimateFromBody: request.Input, the prompt part of its estimate.
func inputFromBody(r *http.Request) int64 { return request.Input(r) }
