// Package upstream holds a gateway's own provider keys to the provider's
// limits: an http.RoundTripper that sends each request on the first key
// with room, fails over between keys on a provider 429, and never sends a
// request a key's published figures say the provider would refuse.
//
//	keys := []upstream.Key{
//		{Name: "openai-1", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 200_000},
//			Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_KEY_1")) }},
//		{Name: "openai-2", Limits: llmrate.Limits{RequestsPerMinute: 500, TokensPerMinute: 200_000},
//			Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_KEY_2")) }},
//	}
//	t, err := upstream.New(keys)
//	...
//	proxy := &httputil.ReverseProxy{Rewrite: ..., Transport: t}
//
// It plugs into httputil.ReverseProxy and http.Client alike, behind the
// llmrate middleware or alone. Like golang.org/x/oauth2's Transport, it
// never modifies the caller's request: each attempt is a fresh clone, sent
// on the base RoundTripper (WithBase; default http.DefaultTransport).
//
// # Keys and their buckets
//
// Each key has the same exact buckets as the middleware's (requests and
// tokens per minute), held, as a provider holds its own, to 1× its
// per-minute figures (the figures also held as a one-minute
// llmrate.Window, capacity the figure: a request whose estimate exceeds a
// key's TokensPerMinute never fits that key), and to the key's Windows
// (llmrate.Limits.Windows: e.g. a free tier's requests per day, or
// Anthropic's input and output tokens per minute), in the given store
// (WithStore: an llmrate.MemoryStore by default, per process; a
// redisstore.Store holds a key to one limit across every gateway process).
// A key's buckets are the solo workspace "upstream:"+Name
// (llmrate.ReservedWorkspacePrefix): the llmrate middleware refuses that
// prefix to its callers (401 invalid_api_key), so a Limiter and a Transport
// may share one store. Each admission
// has its own identity (llmrate.NewAdmissionID), which its reconcile carries
// with the store's receipt (on the default memory store, which loses no
// reply, only a key with ConcurrentRequests gets one, to name its slot). A key's Limits.ConcurrentRequests (0: none)
// caps its requests in flight to the provider: the store's gauge holds a
// slot from admission until the response body is read to its end or
// closed, or the attempt fails (for a 101 Switching Protocols upgrade, a
// realtime session, until the upgraded connection is closed); a key
// without a free slot is skipped like one without room.
//
// A request debits its estimate (WithEstimator; default
// llmrate.EstimateTokens: Content-Length / 4, floor 1, where the length of
// a buffered chunked body is its real length) from the first key in order
// that has room. The estimate is replaced by the charge exactly once, when
// the response body is read to its end or closed, whichever comes first,
// by the llmrate charge rule: the provider's final usage on a completed
// response (read by the usage package, whatever its framing and encoding),
// else the reported input (or the estimate) plus the larger of the reported
// output and the generated text's bytes / 4. A body closed before its end
// is a cut response, unless all of its declared length was read or the
// stream's terminal event was (in an event stream without a
// Content-Encoding: OpenAI's "data: [DONE]", Anthropic's
// message_stop, the Responses API's response.completed: the official SDKs
// stop reading there and close). The body streams through unbuffered. A
// body never read to its end nor closed is never reconciled: its estimate
// stands (and net/http leaks its connection anyway). A 101 Switching
// Protocols response (a WebSocket, such as a realtime API) is charged its
// estimate and its body, the upgraded connection, is returned writable (an
// io.ReadWriteCloser when the base returned one), as httputil.ReverseProxy
// needs it; on a key with ConcurrentRequests the charge is settled, and the
// slot released, when that connection is closed (ReverseProxy closes it
// when either side hangs up), else at once. The reconcile is a
// store call on the goroutine that reads the body's end or closes it: with
// a shared store, one round trip there, bounded by WithStoreTimeout. It
// carries its admission's identity (where it has one) and the store's
// receipt, so a store applies it at most once.
//
// # Failover
//
// Keys are tried in order. A key is skipped, and the next one considered,
// when:
//   - its own buckets have no room (or the request is larger than one of
//     them whole: its tokens or input tokens in some window);
//   - the provider answered it 429: it is skipped until the provider says
//     it has room (Retry-After-Ms, Retry-After in seconds or as an
//     HTTP-date, else the latest reset among the limits its headers below
//     report at 0 remaining, else DefaultProviderSkip: a 429 whose headers
//     show room in every limit, such as OpenAI's "Request too large" for a
//     single request above the per-minute figure, skips the key for 1 s,
//     never until the reset of a limit that still has room, so that one
//     oversized request does not take every key out of rotation), for the
//     request's model when the request's JSON body names one at its top
//     level, else for every model (a key holds at most 256 per-model
//     skips, each under a name of at most 256 bytes; every longer name
//     shares one skip, apart from the shorter names);
//   - a response of the provider's (any status) said 0 remaining: OpenAI's
//     x-ratelimit-remaining-requests or -tokens, until the matching
//     x-ratelimit-reset-* (a Go-style duration such as 6m0s, 1.5s, 20ms);
//     Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-remaining, until the matching -reset (RFC 3339). It
//     is skipped for the request's model, as for a 429.
//
// All times are read on WithClock's clock; no skip lasts longer than
// MaxProviderSkip. A key skipped without sending is not an attempt: at most
// WithMaxAttempts attempts (default 3) reach a provider. A provider 429
// keeps its attempt's estimate charged (the provider counted the request
// too). The body is replayed byte for byte from GetBody, or from a buffer
// when it is at most MaxReplayBody bytes; a larger body without GetBody is
// sent once and a 429 to it returned as sent. When the last attempt made
// got a 429 (attempts exhausted, the body not replayable, or no further
// key could take the request), that 429 is returned as the provider sent
// it.
//
// When no attempt could be made, RoundTrip answers a synthesized 429 with
// llmrate's error envelope ("type": "rate_limit_error", "code":
// "rate_limit_exceeded", "param": null), a fresh X-Request-Id and
// Retry-After the whole seconds, rounded up, until the soonest key that
// may fit has room (for a key skipped by the provider, the end of its
// skip; its buckets are not asked, since asking debits), at least 1. A
// wait of 60 s or less is sent as it is. A longer one, when a provider's
// skip (up to MaxProviderSkip) or a key's window longer than a minute (a
// daily quota) holds every key, is sent as the honest wait too, not
// clamped, with X-Should-Retry: false, so that the official OpenAI and
// Anthropic SDKs hand it to the caller instead of sleeping and resending.
// The message names what the soonest key waits on, as the llmrate
// middleware's 429s do: the meter and window of its bucket that refused
// ("Rate limit reached for requests per day (upstream key): limit 250 per
// day, …"), or the provider's rate limit. A request larger than the whole
// capacity of one of every key's buckets (a tokens or input tokens meter,
// the per-minute figures held as a one-minute window) gets Retry-After:
// 60, X-Should-Retry: false, and a message naming each meter and window
// it exceeds with its capacity ("input tokens per minute (its estimated
// 1001 input tokens exceed a capacity of 1000)") and saying retrying will
// not help.
//
// # Failures
//
// A failure before the provider saw the request (the base RoundTripper's
// error before it wrote the request's headers, observed through
// net/http/httptrace — a dial error, say; or a panic in Authorize) credits
// the reservation back in full, its request and its tokens
// (llmrate.ReconcileRequest.Refund), and RoundTrip returns the error. A base
// RoundTripper that reports no httptrace events has every error treated so.
// An error after the headers were written charges the estimate. Neither is
// retried on another key. A store fault (an error, a call past
// WithStoreTimeout, a panic) on admission fails open: the key is used
// unchecked, counted in FailOpens and logged at warn. A reconcile (or
// refund) the store fails is retried on goroutines of the Transport's,
// each with its own backoff and at most 16 tries at once, for
// ReconcileRetryFor (5 s) from its first failure; one still not applied
// then (or, with a try in flight, when that try fails: within one store
// timeout more) is dropped, its estimate standing: counted in
// FailOpens and DroppedReconciles, logged at warn and reported to the
// observer (ReconcileEvent.Err), never silently. Close waits for the
// reconciles being retried (call it at shutdown, with a deadline; those
// still waiting when it passes are dropped, counted).
//
// # Observability
//
// WithObserver receives an AttemptEvent for every key considered (admitted,
// skipped by its own limit, skipped by the provider, provider 429, failed)
// and a ReconcileEvent for every reservation settled; WithLogger logs them
// at debug, faults at warn. Keys appear by Name, never by credential; the
// caller's Authorization, X-Api-Key and Api-Key headers are removed from
// every attempt before Authorize sets the key's, and the response's Request
// is the caller's request, not the clone that carried the credential.
//
// The guide is docs/upstream.md at the root of this module.
package upstream
