// Package llmrate is net/http middleware for LLM API gateways that enforces
// requests-per-minute and tokens-per-minute limits before the provider is
// contacted, and reconciles the token charge with the usage the provider
// reports in its response.
//
// # Quick start
//
//	lim, err := llmrate.New() // Free tier for every key, in-memory store
//	if err != nil { … }
//	http.Handle("/v1/", lim.Middleware(proxy))
//	http.Handle("GET /platform/v1/limits", lim.LimitsHandler())
//
// # Semantics
//
// Every request is checked against four token buckets, in this order: the
// key's requests, the key's tokens, the workspace's requests, the
// workspace's tokens. Each bucket holds twice its per-minute figure (a
// burst of 2× is admitted at once) and refills continuously at the figure
// per minute, in exact integer arithmetic. A request is admitted only if all
// four have room; a refused request changes no bucket.
//
// The tokens buckets are debited an estimate up front (Content-Length/4,
// floor 1; see WithEstimator). After the response, the estimate is replaced
// by the provider's reported input+output tokens, found in the JSON or SSE
// body as it streams by (see UsageScanner): over-estimates are credited
// back, under-estimates debited forward. Requests buckets never reconcile.
//
// A refused request gets an OpenAI-shaped 429 with Retry-After = the whole
// seconds until it would fit in every bucket, clamped to 1…60; a request
// larger than a whole bucket gets Retry-After 60 and a message saying that
// retrying will not help. The upstream's own responses, its 429s included,
// are never rewritten (unless WithRateLimitHeaders is on, which replaces the
// upstream's rate-limit headers). WithRateLimitTrailers adds, after the
// body, the key's and workspace's remaining figures once the real charge
// replaced the estimate (not on the upstream's own 429s).
//
// # Failure policy
//
// The limiter fails open: if its own state faults (a store error, a store
// call past its timeout, a panic inside the limiter), the request passes
// through, and the miss is counted (FailOpens), logged at warn and reported
// to the Observer. Bad client input is not a fault: a request without an
// API key gets a 401 with code missing_api_key.
//
// # Scope
//
// The default MemoryStore counts per process: N gateway processes admit up
// to N× the figures. The redisstore package shares one exact limit across
// processes.
package llmrate
