package usage_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

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

// benchCodings are the encodings the decoding benchmarks compare, each
// with its library's encoder and a reader over encoded bytes (the decoder
// alone, for the baseline).
var benchCodings = []struct {
	name string
	enc  func(io.Writer) io.WriteCloser
	dec  func(io.Reader) io.Reader
}{
	{"gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
		func(r io.Reader) io.Reader { zr, _ := gzip.NewReader(r); return zr }},
	{"deflate", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) },
		func(r io.Reader) io.Reader { zr, _ := zlib.NewReader(r); return zr }},
	{"br", func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) },
		func(r io.Reader) io.Reader { return brotli.NewReader(r) }},
	{"zstd", func(w io.Writer) io.WriteCloser { zw, _ := zstd.NewWriter(w); return zw },
		func(r io.Reader) io.Reader {
			zr, _ := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
			return zr
		}},
}

// benchEncodedStream is a 233 KB SSE stream (1,000 content deltas and a
// usage chunk), encoded per coding.
func benchEncodedStream(b *testing.B, enc func(io.Writer) io.WriteCloser) (plain, encoded []byte) {
	plain = append(bytes.Repeat(sseEvent, 1000), "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"...)
	var buf bytes.Buffer
	w := enc(&buf)
	_, _ = w.Write(plain)
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	return plain, buf.Bytes()
}

// BenchmarkScanEncoded: the scanner on an encoded stream written in 4 KB
// pieces, decoding included; MB/s is of decoded bytes. The limiter's share
// should be BenchmarkDecoderAlone (the library alone) plus
// BenchmarkScanSSE (the scan alone), nothing more.
func BenchmarkScanEncoded(b *testing.B) {
	for _, c := range benchCodings {
		b.Run(c.name, func(b *testing.B) {
			plain, encoded := benchEncodedStream(b, c.enc)
			b.SetBytes(int64(len(plain)))
			b.ReportAllocs()
			s := usage.NewScanner("text/event-stream", c.name)
			for range b.N {
				for p := encoded; len(p) > 0; p = p[min(len(p), 4096):] {
					_, _ = s.Write(p[:min(len(p), 4096)])
				}
				if r := s.Finish(); r.Usage.OutputTokens != 4 || r.DecodeErr != nil {
					b.Fatal("usage", r)
				}
				s.Reset("text/event-stream", c.name)
			}
		})
	}
}

// BenchmarkDecoderAlone: the decoder library alone on the same bytes,
// read into a 32 KB buffer and dropped.
func BenchmarkDecoderAlone(b *testing.B) {
	for _, c := range benchCodings {
		b.Run(c.name, func(b *testing.B) {
			plain, encoded := benchEncodedStream(b, c.enc)
			b.SetBytes(int64(len(plain)))
			b.ReportAllocs()
			buf := make([]byte, 32<<10)
			for range b.N {
				r := c.dec(bytes.NewReader(encoded))
				n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
				if err != nil || n != int64(len(plain)) {
					b.Fatal(n, err)
				}
				if cl, ok := r.(interface{ Close() }); ok {
					cl.Close()
				}
			}
		})
	}
}
