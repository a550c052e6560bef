package usage_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/llmrate/llmrate/usage"
)

var sseEvent = []byte("data: {\"id\":\"chatcmpl-9xYz\",\"object\":\"chat.completion.chunk\",\"created\":1732000000,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_abc123\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tokens\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")

// benchScanSSE scans a stream of 1,000 copies of event per op.
func benchScanSSE(b *testing.B, event []byte) {
	block := bytes.Repeat(event, 1000)
	s := usage.NewScanner("text/event-stream", "")
	b.SetBytes(int64(len(block)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, _ = s.Write(block)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/event")
}

// BenchmarkScanSSE: the scanner on a content-delta-heavy stream.
func BenchmarkScanSSE(b *testing.B) { benchScanSSE(b, sseEvent) }

// BenchmarkScanSSEFullParse: the same stream when every event must be
// parsed in full (its text holds a \u escape, so the skip test cannot rule
// a report out): the scanner's worst case per event.
func BenchmarkScanSSEFullParse(b *testing.B) {
	benchScanSSE(b, bytes.Replace(sseEvent, []byte(`" tokens"`), []byte(`" caf\u00e9s"`), 1))
}

// BenchmarkScanSSEEncodingJSON: what decoding every event with
// encoding/json costs, for comparison in the same run.
func BenchmarkScanSSEEncodingJSON(b *testing.B) {
	block := bytes.Repeat(sseEvent, 1000)
	b.SetBytes(int64(len(block)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, ev := range bytes.Split(block, []byte("\n\n")) {
			data, ok := bytes.CutPrefix(ev, []byte("data: "))
			if !ok {
				continue
			}
			var v map[string]any
			_ = json.Unmarshal(data, &v)
			_, _ = v["usage"].(map[string]any)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/event")
}

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

// BenchmarkScan100MB: memory for scanning a 100 MB stream (B/op is the whole
// run's allocation).
func BenchmarkScan100MB(b *testing.B) {
	block := bytes.Repeat(sseEvent, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s := usage.NewScanner("text/event-stream", "")
		for n := 0; n < 100<<20; n += len(block) {
			_, _ = s.Write(block)
		}
		s.Finish()
	}
}
