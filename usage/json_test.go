package usage_test

import (
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
