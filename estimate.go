package llmrate

import "net/http"

// EstimateTokens is the default estimator: the declared Content-Length
// divided by 4, never less than 1. A request with no declared length
// (chunked, or ContentLength -1) estimates at the floor of 1.
func EstimateTokens(r *http.Request) int64 {
	return max(1, r.ContentLength/4)
}
