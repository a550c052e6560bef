// Package usage reads the token usage an LLM provider reports in a response
// body as the body streams past, in constant memory, without ever blocking,
// buffering or altering it.
//
// A Scanner is fed the body bytes a client received (Write) and reports at
// the end (Finish) a Result: the usage the provider reported, whether that
// report is final, and how many bytes of generated text the body carried.
// Result.Charge turns that into the tokens a rate limiter charges.
//
// Framing is chosen by the Content-Type: application/json (one JSON text, or
// a top-level array whose elements are each a document), text/event-stream
// (each event's data is a document) and application/x-ndjson (each line is
// a document). A gzip Content-Encoding is inflated on the side. Anything
// else carries no usage.
//
// Where a report may be, how its fields count, and which members hold
// generated text is one table (providers.go); the counting rules it follows
// are written out, with a fixture per provider shape, in
// testdata/usage/README.md at the root of this module.
package usage
