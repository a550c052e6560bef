package usage_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/llmrate/llmrate/usage"
)

func largeJSON(b *testing.B) []byte {
	return readFixture(b, fixture{File: "anthropic-messages.json"})
}

// BenchmarkScanJSON: the scanner on a large JSON response.
func BenchmarkScanJSON(b *testing.B) {
	body := largeJSON(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	s := usage.NewScanner("application/json", "")
	for range b.N {
		_, _ = s.Write(body)
		if !s.Finish().Reported {
			b.Fatal("no usage")
		}
		s.Reset("application/json", "")
	}
}

func BenchmarkScanJSONEncodingJSON(b *testing.B) {
	body := largeJSON(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for range b.N {
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// largeResponse is a 64 KB chat completion: long generated content, a tool
// call with JSON arguments, usage at the end.
var largeResponse = []byte(`{"id":"chatcmpl-big","object":"chat.completion","created":1732000000,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"` +
	strings.Repeat(`Rate limits keep gateways honest; \"usage\": {\"prompt_tokens\": 9} is only text here. `, 700) +
	`","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"query\":\"tokens per minute\",\"limit\":10}"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1520,"completion_tokens":15910,"total_tokens":17430}}`)

// BenchmarkScanJSONLarge: the scanner on a 64 KB JSON response.
func BenchmarkScanJSONLarge(b *testing.B) {
	b.SetBytes(int64(len(largeResponse)))
	b.ReportAllocs()
	s := usage.NewScanner("application/json", "")
	for range b.N {
		_, _ = s.Write(largeResponse)
		if r := s.Finish(); r.Usage.OutputTokens != 15910 {
			b.Fatal("usage", r)
		}
		s.Reset("application/json", "")
	}
}

func BenchmarkScanJSONLargeEncodingJSON(b *testing.B) {
	b.SetBytes(int64(len(largeResponse)))
	b.ReportAllocs()
	for range b.N {
		var v map[string]any
		if err := json.Unmarshal(largeResponse, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// oneKBResponse is the root package's BenchmarkMiddleware body (and
// bench/peers_test.go's): a 1 KB OpenAI chat completion with usage, its
// content one 750-byte string.
var oneKBResponse = []byte(`{"id":"chatcmpl-abc123","object":"chat.completion","created":1732000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("word ", 150) + `","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":150,"total_tokens":169},"system_fingerprint":"fp_abc"}`)

// BenchmarkScanJSON1KB: the scanner on BenchmarkMiddleware's 1 KB body,
// written at once as its handler writes it.
func BenchmarkScanJSON1KB(b *testing.B) { benchScanBody(b, oneKBResponse, 150) }

// BenchmarkScanJSON1KBNoContent: the same body with its content "": what
// the scan costs outside the 750-byte string.
func BenchmarkScanJSON1KBNoContent(b *testing.B) { benchScanBody(b, oneKBNoContent, 150) }

var oneKBNoContent = bytes.Replace(oneKBResponse, bytes.Repeat([]byte("word "), 150), nil, 1)

// BenchmarkScanJSONLargeFloor and BenchmarkScanJSON1KBFloor: one
// bytes.IndexByte pass over the same bytes for a byte they lack, the floor
// of any scan that reads every byte.
func BenchmarkScanJSON1KBFloor(b *testing.B)   { benchIndexByteFloor(b, oneKBResponse) }
func BenchmarkScanJSONLargeFloor(b *testing.B) { benchIndexByteFloor(b, largeResponse) }

func benchScanBody(b *testing.B, body []byte, output int64) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	s := usage.NewScanner("application/json", "")
	for range b.N {
		_, _ = s.Write(body)
		if r := s.Finish(); r.Usage.OutputTokens != output {
			b.Fatal("usage", r)
		}
		s.Reset("application/json", "")
	}
}

var floorSink int

func benchIndexByteFloor(b *testing.B, body []byte) {
	if bytes.IndexByte(body, 0) >= 0 {
		b.Fatal("the body holds the byte searched for")
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for range b.N {
		floorSink += bytes.IndexByte(body, 0)
	}
}
