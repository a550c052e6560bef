package usage_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/llmrate/llmrate/usage"
)

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
