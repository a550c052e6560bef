// Package request reads what an LLM API request asks for — the model it
// names, the text of its prompt and the output it may generate — from its
// body and path, before the request is sent on. It is the request side of
// what package usage reads on the response side (what the provider
// reports), and what llmrate's ModelFromBody and EstimateFromBody run.
//
// Model returns the model; Estimate a token estimate, the prompt's text
// bytes / 4 plus the output allowance (max_tokens and the like); Input the
// prompt part alone. Each reads the JSON body ahead without consuming it:
// the next handler (a httputil.ReverseProxy, say) still reads the whole
// body, byte for byte, with the request's Content-Length unchanged. At most
// the first MaxBody bytes are read ahead and held, and only until the next
// handler has read them (or closed the body). However many of Model,
// Estimate and Input run on one request, the body is read ahead once, and
// scanned once when Prepare runs first (or Estimate or Input before Model).
// A body sent with a Content-Encoding the response side decodes is read as
// its decoded bytes, within the same bounds (encoding.go).
//
// The body's JSON is validated as encoding/json would validate it: only a
// document encoding/json accepts counts, and the values counted are those
// encoding/json would decode (strings with their escapes resolved and
// invalid UTF-8 replaced by U+FFFD).
package request

// MaxBody bounds what is read ahead of a request body and held in memory:
// at most this many leading bytes (after decoding, for an encoded body;
// and at most this many encoded bytes held for the next handler).
const MaxBody = 1 << 20
