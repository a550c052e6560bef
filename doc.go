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
// # Plans as an operator writes them
//
// WithPlans(resolver, otherwise) replaces the tier ladder with the
// operator's own plans: a Plan has a Name ("pro", shown in every 429, the
// limits endpoint and the metrics), its Limits (the workspace's, and each
// key's unless Keys is set) and its Models entries. A request on an entry
// spends the entry's per-minute buckets and is held to the plan's windows
// and gauge as well, so a plan's quota covers every model. Unlimited (−1)
// as a per-minute figure means no bucket for that meter. A Window with a
// Calendar (CalendarDay, CalendarWeek, CalendarMonth) and a Zone is a quota
// that is full again at each period's start in that zone (00:00, Monday
// 00:00, the 1st at 00:00, DST-aware); one with Session opens at the first
// admission and is full again Per later. The store must be a QuotaStore
// (the memory store and the Redis store are).
//
// # Policies beyond the plan tier
//
// All optional. WithModelLimits (with WithModel, e.g. ModelFromBody) gives
// models, or model prefixes ending in "*", four buckets of their own at
// their own figures per tier. WithOverrides gives workspaces figures of
// their own instead of their tier's. WithShadow makes every decision and
// reports it (observer, logs, headers) but refuses nothing, so limits can be
// rolled out safely: shadow mode decides exactly as enforcement would.
// Limits.ConcurrentRequests caps the requests of a key, and of a
// workspace, in flight at once (the gauges KeyConcurrent and
// WorkspaceConcurrent: a slot is held until the response has ended).
// WithMaxWait holds a request that would fit its buckets within a bounded
// time instead of refusing it: it is debited at once (a reservation) and
// forwarded after exactly its wait, in the order the store decided.
// WithMaxInFlight caps this process's requests inside the next handler at
// once: past it a request is shed before any store call (nothing debited)
// with a 503 overloaded answer (Anthropic's 529 overloaded_error when it
// carries anthropic-version), which the providers' SDKs retry; Shed
// counts them. WithPriority keeps a share of every bucket and gauge from
// the priority classes named (a batch job) for the rest of the traffic:
// such a class reaches (1 − reserve) of each bucket, even alone, and a
// class read from a header the client sets is the client's choice.
//
// # Limits as providers publish them
//
// Limits.Windows adds limits over other windows and meters, as providers
// publish them: e.g. Window{Per: 24 * time.Hour, Requests: 1_500}, a
// daily quota that gives one request back every 57.6 s (never all at once
// at midnight; Window.Calendar is the quota that does), or Window{Per: time.Minute, InputTokens: 400_000,
// OutputTokens: 80_000}, Anthropic's separate input and output tokens per
// minute. A window's bucket holds its figure (no burst), is checked in the
// same atomic step as the per-minute buckets, and refuses with a message
// naming meter, window and scope ("requests per day (workspace)"), a
// Retry-After up to the window when it is longer than a minute (then with
// x-should-retry: false), and Decision.Window / DecisionEvent.Window
// naming the window. The input meter is debited the input estimate and
// charged the reported input less cache reads; the output meter is
// debited nothing and charged the reported output. See Window.
//
// # What a client sees
//
// A refused request gets an OpenAI-shaped 429 with Retry-After = the whole
// seconds until it would fit in every bucket, rounded up and at least 1:
// at most 60 for the per-minute buckets, the honest wait for a longer
// window (a spent daily quota: hours; a calendar month: until the 1st),
// with X-Should-Retry: false past 60 s. A request larger than a whole
// bucket gets Retry-After 60, X-Should-Retry: false and a message saying
// that retrying will not help. The upstream's own responses are never rewritten,
// except that WithRateLimitHeaders replaces the upstream's rate-limit
// headers on admitted responses; the upstream's own 429 is relayed
// untouched whatever the header style. WithRateLimitTrailers adds, after
// the body, the key's and workspace's remaining figures once the real
// charge replaced the estimate (not on the upstream's own 429s).
//
// The ResponseWriter a handler gets is valid until the handler returns, as
// net/http requires: a write after that fails with ErrWriterReleased and
// reaches no response.
//
// # Failure policy
//
// The limiter fails open: if its own state faults (a store error, a store
// call past its timeout, a panic inside the limiter), the request passes
// through, and the miss is counted (FailOpens), logged at warn and reported
// to the Observer. Bad client input is not a fault: a request without an
// API key gets a 401 with code missing_api_key; one whose workspace (by
// default its key) begins ReservedWorkspacePrefix, "upstream:", a 401 with
// code invalid_api_key (those workspaces are package upstream's provider
// keys, so the two may share a store). An invalid override is a
// fault for the requests it would govern: they fail open, counted and
// logged.
//
// # Scope
//
// The default MemoryStore counts per process: N gateway processes admit up
// to N× the figures. The redisstore package shares one exact limit across
// processes.
//
// # For store writers: the buckets and their charges
//
// Every request is checked against four token buckets, in this order: the
// key's requests, the key's tokens, the workspace's requests, the
// workspace's tokens. Each bucket holds twice its per-minute figure (a
// burst of 2× is admitted at once) and refills continuously at the figure
// per minute, in exact integer arithmetic. A request is admitted only if all
// four have room; a refused request changes no bucket.
//
// The tokens buckets are debited an estimate up front (Content-Length/4,
// floor 1; see WithEstimator, EstimateFromBody and WithCalibration). After the response, the estimate is replaced
// by the charge, read from the JSON, SSE, NDJSON or AWS event-stream body
// as it streams by (see package usage): the provider's final reported input+output tokens
// when the response completed; otherwise the reported input (else the
// estimate) plus the larger of the reported output and the bytes of
// generated text ÷ 4 (see ReconcileKind), or what WithTokenCost makes of
// that usage. Over-estimates are credited back,
// under-estimates debited forward. Requests buckets never reconcile.
//
// # Guides
//
// The repository's docs/ folder has a guide per subject: limits and tiers
// (docs/limits.md), what a request costs (docs/cost.md), concurrency and
// waits (docs/concurrency.md), headers and trailers (docs/headers.md),
// Redis and leases (docs/redis.md), upstream keys (docs/upstream.md),
// observability (docs/observability.md), stores (docs/store.md), every
// option (docs/configuration.md) and known limits (docs/known-limits.md).
package llmrate
