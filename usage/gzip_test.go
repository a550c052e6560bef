package usage_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// assertNoGzipGoroutine fails if any goroutine but the test runner's is
// running: called from a serial test, a left-over gzip decoder's goroutine
// is the one it finds.
func assertNoGzipGoroutine(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t)
}

func TestScannerGzipCopyOnly(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = io.WriteString(zw, `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	require.NoError(t, zw.Close())
	s := usage.NewScanner("application/json; charset=utf-8", "gzip")
	_, _ = s.Write(buf.Bytes())
	got := s.Finish()
	require.True(t, got.Reported)
	assert.Equal(t, usage.Usage{InputTokens: 3, OutputTokens: 4}, got.Usage)
	assert.Equal(t, int64(len(`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)), got.Bytes, "Bytes counts decoded bytes")
}

func TestRandomSplitsGzip(t *testing.T) {
	t.Parallel()
	f := fixture{File: "anthropic-messages-stream.sse.gz", ContentType: "text/event-stream", ContentEncoding: "gzip"}
	body := readFixture(t, f)
	ref := usageref.Body(f.ContentType, gunzip(t, f, body))
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		s := usage.NewScanner(f.ContentType, f.ContentEncoding)
		for b := body; len(b) > 0; {
			n := min(len(b), 1+r.IntN(40))
			_, _ = s.Write(b[:n])
			b = b[n:]
		}
		got := s.Finish()
		require.True(t, got.Reported)
		assert.Equal(t, usage.Usage{InputTokens: 412, OutputTokens: 96}, got.Usage)
		assert.Equal(t, ref.Gen, got.GeneratedBytes)
	}
}

// TestGzipScannerClosed: a gzip scanner abandoned mid-body (Close), or
// reset for another body, leaves no goroutine behind (goleak checks at the
// end of the package's tests; this test checks right away).
func TestGzipScannerClosed(t *testing.T) {
	f := fixture{File: "anthropic-messages-stream.sse.gz", ContentType: "text/event-stream", ContentEncoding: "gzip"}
	body := readFixture(t, f)
	for _, end := range []func(*usage.Scanner){
		(*usage.Scanner).Close,
		func(s *usage.Scanner) { s.Reset("application/json", "") },
		func(s *usage.Scanner) { s.Reset("text/event-stream", "gzip") },
	} {
		s := usage.NewScanner(f.ContentType, f.ContentEncoding)
		_, _ = s.Write(body[:len(body)/2])
		end(s)
		s.Close() // twice is fine
		assertNoGzipGoroutine(t)
	}
	// A scanner created and never written starts no goroutine at all.
	_ = usage.NewScanner(f.ContentType, f.ContentEncoding)
	assertNoGzipGoroutine(t)
}

// TestEncodedScannerClosedEveryCoding: for deflate, br and zstd too, a
// scanner abandoned mid-body, reset, or finished on a body cut short joins
// its decoder's goroutine; the cut body is reported in DecodeErr and counts
// as cut; the whole body is not.
func TestEncodedScannerClosedEveryCoding(t *testing.T) {
	plain := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n")
	for _, tc := range []struct {
		coding string
		enc    func(io.Writer) io.WriteCloser
	}{
		{"deflate", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }},
		{"br", func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) }},
		{"zstd", func(w io.Writer) io.WriteCloser { zw, _ := zstd.NewWriter(w); return zw }},
	} {
		var buf bytes.Buffer
		w := tc.enc(&buf)
		_, _ = w.Write(plain)
		require.NoError(t, w.Close())
		body := buf.Bytes()

		whole := scan("text/event-stream", tc.coding, body, 5)
		assert.NoError(t, whole.DecodeErr, tc.coding)
		assert.True(t, whole.Complete(false), tc.coding)
		assert.Equal(t, usage.Usage{InputTokens: 3, OutputTokens: 4}, whole.Usage, tc.coding)
		assertNoGzipGoroutine(t)

		for _, end := range []func(*usage.Scanner){
			(*usage.Scanner).Close,
			func(s *usage.Scanner) { s.Reset("application/json", "") },
			func(s *usage.Scanner) { s.Reset("text/event-stream", tc.coding) },
			func(s *usage.Scanner) {
				r := s.Finish()
				var de *usage.DecodeError
				assert.ErrorAs(t, r.DecodeErr, &de, tc.coding)
				assert.True(t, r.Cut(), tc.coding)
				assert.False(t, r.Complete(false), tc.coding)
			},
		} {
			s := usage.NewScanner("text/event-stream", tc.coding)
			_, _ = s.Write(body[:len(body)-3])
			end(s)
			s.Close()
			assertNoGzipGoroutine(t)
		}
	}
}
