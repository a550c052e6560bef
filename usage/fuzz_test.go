package usage_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
)

func addFixtureSeeds(f *testing.F, ct string) {
	for _, fx := range loadFixtures(f) {
		if fx.ContentType != ct || fx.ContentEncoding != "" {
			continue
		}
		if b := readFixture(f, fx); len(b) <= 4<<10 { // larger ones make minimizing new inputs crawl
			f.Add(b, uint8(7))
		}
	}
}

// agrees reports how got differs from the reference, or "" when it does
// not. Generated text is compared on valid UTF-8 only: the scanner counts
// a byte that is not UTF-8 as one, encoding/json as U+FFFD (three).
func agrees(got usage.Result, want usageref.Result, body []byte) string {
	switch {
	case got.Reported != want.Reported || got.Usage != (usage.Usage{InputTokens: want.Input, OutputTokens: want.Output,
		CachedInputTokens: want.Cached, CacheWriteTokens: want.CacheWrite, ReasoningTokens: want.Reasoning}):
		return "usage"
	case got.Final != want.Final || got.InputReported != want.InputReported:
		return "final/input flags"
	case got.GeneratedBytes != want.Gen && utf8.Valid(body):
		return "generated text"
	}
	return ""
}

func checkAgainstRef(t *testing.T, ct string, body []byte, split uint8) {
	t.Helper()
	if len(body) > 16<<10 {
		return // keeps the fuzzer fast; the fixture tests cover large bodies
	}
	want := usageref.Body(ct, body)
	sizes := []int{len(body), int(split)}
	if len(body) <= 4<<10 {
		sizes = append(sizes, 1) // one byte at a time: small inputs only
	}
	for _, n := range sizes {
		got := scan(ct, "", body, n)
		if what := agrees(got, want, body); what != "" {
			t.Fatalf("split %d: %s: scanner %+v != encoding/json reference %+v for %q", n, what, got, want, body)
		}
	}
}

// FuzzUsageJSON: the JSON scanner never panics and reports exactly what a
// full encoding/json parse finds at the documented places, and the same
// generated text, whatever the write boundaries.
func FuzzUsageJSON(f *testing.F) {
	addFixtureSeeds(f, "application/json")
	for _, s := range []string{
		`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"us\u0061ge":{"prompt_tokens":1}}`,
		`{"usage":{"prompt_tokens":1},"usage":null}`,
		`{"usage":{"prompt_tokens":-1,"completion_tokens":2}}`,
		`{"usage":{"prompt_tokens":9223372036854775808}}`,
		`{"usage":{"prompt_tokens":01}}`,
		`[{"usageMetadata":{"promptTokenCount":3}},{"usageMetadata":{"candidatesTokenCount":4}}]`,
		`{"type":"message_start","message":{"usage":{"input_tokens":5}}}`,
		`{"message":{"usage":{"input_tokens":5}},"type":"message_start"}`,
		`{"choices":[{"message":{"content":"{\"usage\":{\"prompt_tokens\":9}}"}}]}`,
		`{"done":true,"prompt_eval_count":1,"eval_count":2}`,
		`{"choices":[{"delta":{"content":"caf\u00e9 \ud83d\ude00 \ud800x \"q\" \n"}}]}`,
		`{"content":"a","content":"b","x":{"text":["no"],"reasoning":"yes"}}`,
		`{"usage":{"input_tokens":1,"output_tokens":2,"iterations":[{"type":"compaction","input_tokens":5,"cache_read_input_tokens":3,"output_tokens":4},{"type":"advisor_message","input_tokens":9},{"type":"message","input_tokens":1,"output_tokens":2}]}}`,
		`{"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":5},"prompt_cache_hit_tokens":1}}`,
		`{"usage":{"input_tokens":8,"output_tokens":4,"input_tokens_details":{"cached_tokens":6},"output_tokens_details":{"reasoning_tokens":3}}}`,
		`{"object":"interaction","usage":{"total_input_tokens":3,"total_output_tokens":4,"total_thought_tokens":5,"total_tool_use_tokens":6,"total_cached_tokens":2}}`,
		`{"event_type":"interaction.completed","interaction":{"usage":{"total_input_tokens":3,"total_output_tokens":4}}}`,
		`{"predictions":[{"embeddings":{"statistics":{"token_count":6}}},{"embeddings":{"statistics":{"token_count":7}}}]}`,
		`{"usageMetadata":{"promptTokenCount":9,"cachedContentTokenCount":8,"thoughtsTokenCount":2}}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, split uint8) {
		checkAgainstRef(t, "application/json", body, split)
	})
}

// FuzzUsageSSE: the same for event streams, including framing.
func FuzzUsageSSE(f *testing.F) {
	addFixtureSeeds(f, "text/event-stream")
	for _, s := range []string{
		"data: {\"usage\":{\"prompt_tokens\":1}}\n\n",
		"data:{\"usage\":{\"prompt_tokens\":1}}\r\n\r\n",
		"data: {\"usage\":\ndata: {\"prompt_tokens\":1}}\n\n",
		": comment\ndata: {\"usage\":{\"prompt_tokens\":1}}\r\r",
		"data: {\"usage\":{\"prompt_tokens\":1}}",
		"\xEF\xBB\xBFdata: {\"usage\":{\"prompt_tokens\":2}}\n\n",
		"event: x\ndata\ndata: {}\n\n",
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2,\"iterations\":[{\"type\":\"compaction\",\"input_tokens\":5},{\"type\":\"message\",\"output_tokens\":2}]}}\n\n",
		"data: {\"event_type\":\"interaction.completed\",\"interaction\":{\"usage\":{\"total_input_tokens\":3,\"total_thought_tokens\":4}}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":9,\"completion_tokens_details\":{\"reasoning_tokens\":5}}}\n\n",
	} {
		f.Add([]byte(s), uint8(2))
	}
	f.Fuzz(func(t *testing.T, body []byte, split uint8) {
		checkAgainstRef(t, "text/event-stream", body, split)
	})
}

// FuzzUsageNDJSON: the same for Ollama's NDJSON.
func FuzzUsageNDJSON(f *testing.F) {
	addFixtureSeeds(f, "application/x-ndjson")
	f.Add([]byte("{\"done\":false}\n{\"done\":true,\"eval_count\":3}\n"), uint8(4))
	f.Fuzz(func(t *testing.T, body []byte, split uint8) {
		checkAgainstRef(t, "application/x-ndjson", body, split)
	})
}

// FuzzUsageEventStream: an AWS event stream built from fuzzed payloads
// (as plain events, InvokeModel chunks or exceptions), then possibly cut
// or corrupted, is read as the encoding/json reference (which frames it
// with the AWS SDK's decoder) reads it: the same usage, flags and text,
// and the scanner says it was cut exactly when the reference does; the
// scanner never panics and never changes the bytes written to it.
func FuzzUsageEventStream(f *testing.F) {
	f.Add([]byte(`{"usage":{"inputTokens":3,"outputTokens":4}}`), []byte(`{"delta":{"text":"hi"}}`), uint8(0), uint16(0), uint8(5))
	f.Add([]byte(`{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}`), []byte(`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":5,"outputTokenCount":9}}`), uint8(0b0101), uint16(0), uint8(3))
	f.Add([]byte(`{"usage":{"inputTokens":3}}`), []byte(`{"usage":{"inputTokens":999}}`), uint8(0b1000), uint16(7), uint8(1))
	f.Add([]byte(`{"text":"x"}`), []byte(`{"usage":{"outputTokens":2}}`), uint8(0b110000), uint16(40), uint8(9))
	f.Fuzz(func(t *testing.T, p1, p2 []byte, kinds uint8, at uint16, split uint8) {
		if len(p1)+len(p2) > 8<<10 {
			return
		}
		var buf bytes.Buffer
		enc := eventstream.NewEncoder()
		for i, p := range [][]byte{p1, p2} {
			var hs eventstream.Headers
			switch (kinds >> (2 * i)) & 3 {
			case 0:
				hs.Set(":message-type", eventstream.StringValue("event"))
				hs.Set(":event-type", eventstream.StringValue("contentBlockDelta"))
			case 1:
				hs.Set(":message-type", eventstream.StringValue("event"))
				hs.Set(":event-type", eventstream.StringValue("chunk"))
				p, _ = json.Marshal(struct {
					Bytes []byte `json:"bytes"`
				}{p})
			case 2:
				hs.Set(":message-type", eventstream.StringValue("exception"))
				hs.Set(":exception-type", eventstream.StringValue("throttlingException"))
			case 3:
				hs.Set(":message-type", eventstream.StringValue("error"))
			}
			if err := enc.Encode(&buf, eventstream.Message{Headers: hs, Payload: p}); err != nil {
				t.Skip()
			}
		}
		body := buf.Bytes()
		switch kinds >> 4 & 3 {
		case 1: // cut
			body = body[:int(at)%(len(body)+1)]
		case 2: // one byte corrupted
			body[int(at)%len(body)] ^= 0x5a
		}
		const ct = "application/vnd.amazon.eventstream"
		want := usageref.Body(ct, body)
		orig := bytes.Clone(body)
		for _, n := range []int{len(body), int(split), 1} {
			got := scan(ct, "", body, n)
			textOK := utf8.Valid(p1) && utf8.Valid(p2)
			if what := agrees(got, want, nil); what != "" && (what != "generated text" || textOK) {
				t.Fatalf("split %d: %s: scanner %+v != reference %+v", n, what, got, want)
			}
			if got.Cut() != (want.Pending || want.Exception != "") {
				t.Fatalf("split %d: cut %v (%+v), reference pending %v exception %q", n, got.Cut(), got, want.Pending, want.Exception)
			}
			if !bytes.Equal(orig, body) {
				t.Fatal("the scanner changed the bytes written to it")
			}
		}
	})
}

// TestLongStringsAgreeWithReference: strings long enough for the scanner's
// vectorised run (past its 64-byte probe, across its 256-byte windows) still
// agree with encoding/json: an escape, a raw control byte (invalid JSON:
// nothing counts) or a multi-byte rune at any position, in text and in
// non-text members, whole and split.
func TestLongStringsAgreeWithReference(t *testing.T) {
	specials := []string{`\"`, `\\`, `\n`, `\u00e9`, "\x01", "\x1f", "é", `"`}
	for _, size := range []int{65, 200, 255, 256, 257, 1023, 1024, 1025, 2500} {
		for _, sp := range specials {
			for _, at := range []int{0, 63, 64, 255, 256, 319, 320, size / 2, 1023, 1024, size - 1} {
				if at >= size {
					continue
				}
				s := strings.Repeat("w", at) + sp + strings.Repeat("x", size-at)
				for _, member := range []string{"content", "id"} {
					body := []byte(`{"` + member + `":"` + s + `","usage":{"prompt_tokens":3,"completion_tokens":4}}`)
					checkAgainstRef(t, "application/json", body, uint8(at%251+1))
				}
			}
		}
	}
}
