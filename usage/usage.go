package usage

// Usage is the token usage a provider reported for one response.
//
// The last three fields break the totals down, where the body reports it
// (which fields, per provider, is the table in providers.go and the
// README in testdata/usage at the module root); each is 0 otherwise, a
// malformed one never rejects a report, and each is held within its
// total: CachedInputTokens + CacheWriteTokens <= InputTokens and
// ReasoningTokens <= OutputTokens.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	// CachedInputTokens are the input tokens read from the provider's
	// prompt cache, also counted in InputTokens.
	CachedInputTokens int64
	// CacheWriteTokens are the input tokens written to the provider's
	// prompt cache, also counted in InputTokens.
	CacheWriteTokens int64
	// ReasoningTokens are the output tokens the model spent reasoning, also
	// counted in OutputTokens.
	ReasoningTokens int64
}

// Total returns InputTokens + OutputTokens, saturating at the int64 maximum.
func (u Usage) Total() int64 { return satAdd(u.InputTokens, u.OutputTokens) }

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// Result is what a Scanner found in one body.
type Result struct {
	// Usage holds the reported usage, every counted field combined (last
	// value wins per field); zero when Reported is false.
	Usage Usage
	// Reported: at least one valid usage report was seen.
	Reported bool
	// InputReported: a report carried at least one input field, so
	// Usage.InputTokens is the provider's figure, not a default 0.
	InputReported bool
	// Final: a report that states a response's whole usage was seen, that
	// is, one other than Anthropic's message_start (partial by definition).
	// Whether the response completed is the caller's to say (see Charge).
	Final bool
	// GeneratedBytes is G: the bytes of generated text, the string values
	// of the members listed in providers.go (content, text, delta, …) at
	// any depth, counted as decoded UTF-8 in complete documents only (a
	// body cut mid-document or mid-event counts nothing of that document).
	GeneratedBytes int64
	// PendingEvent: the body stopped in the middle of an SSE event, so the
	// response was cut off.
	PendingEvent bool
	// Bytes is how many (decoded) body bytes the scanner saw.
	Bytes int64
	// DecodeErr is nil, or a *DecodeError: the body's Content-Encoding is
	// not one the scanner decodes (unknown, or a chain such as "gzip, br"),
	// or decoding stopped part-way (corrupt or truncated encoded bytes, a
	// zstd window above 8 MiB, more than 64 MiB decoded, a corrupt or
	// oversized event-stream message). What was decoded before the failure
	// counts, and the body counts as cut there: its reports are partial.
	DecodeErr error
	// Exception is the :exception-type (or :error-code) of the first
	// exception or error message of an AWS event stream, "" if none: such a
	// stream did not complete, so its reports are partial.
	Exception string
}

// Charge returns the tokens the response consumed, given the estimate
// debited for it at admission and whether it was cut off (by the client,
// the upstream, a write error or a handler panic; PendingEvent, DecodeErr
// and Exception count as cut too, see Cut):
//
//   - final usage reported on a completed response: exactly that usage;
//   - otherwise: input + output, where input is the reported input if any
//     was reported, else estimate, and output is the larger of the
//     reported output and ⌊GeneratedBytes / 4⌋.
//
// So an error body (no report, no generated text) charges the estimate, and
// a stream that never reports usage still pays for the text it generated.
// The sum saturates at the int64 maximum.
func (r Result) Charge(estimate int64, cut bool) int64 {
	if r.Complete(cut) {
		return r.Usage.Total()
	}
	in := estimate
	if r.InputReported {
		in = r.Usage.InputTokens
	}
	return satAdd(in, max(r.Usage.OutputTokens, r.GeneratedBytes/4))
}

// Complete reports whether Charge(…, cut) is the provider's final usage
// exactly: a final report was seen and the response was not cut off.
func (r Result) Complete(cut bool) bool {
	return r.Reported && r.Final && !cut && !r.Cut()
}

// Cut reports whether the body itself shows the response did not complete:
// it ended mid-event (PendingEvent), it could not be wholly decoded
// (DecodeErr), or an event stream carried an exception (Exception).
func (r Result) Cut() bool {
	return r.PendingEvent || r.DecodeErr != nil || r.Exception != ""
}
