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
// (each event's data is a document), application/x-ndjson (each line is
// a document) and application/vnd.amazon.eventstream (AWS event streams, as
// Amazon Bedrock sends them: each event's JSON payload is a document, an
// InvokeModelWithResponseStream chunk's document its base64 bytes;
// exception and error messages never are). A Content-Encoding of gzip,
// deflate (zlib or raw), br or zstd is decoded on the side (decode.go
// states the memory bounds); a body that cannot be decoded, or not wholly,
// is reported in Result.DecodeErr. Anything else carries no usage.
//
// Where a report may be, how its fields count, and which members hold
// generated text is one table (providers.go); the counting rules it follows
// are written out, with a fixture per provider shape, in
// testdata/usage/README.md at the root of this module.
package usage
