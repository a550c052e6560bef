package usage_test

import (
	"bytes"
	"encoding/json"
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
