package llmrate_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requestCodings are the Content-Encodings a request body is read through.
var requestCodings = []struct {
	name, header string
	wrap         func(io.Writer) io.WriteCloser
}{
	{"gzip", "gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
	{"x-gzip", "x-gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
	{"deflate (zlib)", "deflate", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }},
	{"deflate (raw)", "deflate", func(w io.Writer) io.WriteCloser { fw, _ := flate.NewWriter(w, flate.BestSpeed); return fw }},
	{"br", "br", func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) }},
	{"zstd", "zstd", func(w io.Writer) io.WriteCloser {
		zw, _ := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		return zw
	}},
}

func encode(t testing.TB, wrap func(io.Writer) io.WriteCloser, write func(io.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := wrap(&buf)
	write(w)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func encodedRequest(body []byte, coding string, chunked bool) *http.Request {
	r := bodyRequest("/v1/chat/completions", body, chunked, 4<<10)
	r.Header.Set("Content-Encoding", coding)
	return r
}

// TestCompressedRequestBodyRead: a request body sent with a
// Content-Encoding the response side decodes (gzip, deflate, br, zstd) is
// read by ModelFromBody and EstimateFromBody as its decoded JSON, and the
// next handler still reads every original (encoded) byte, Content-Length
// unchanged.
func TestCompressedRequestBodyRead(t *testing.T) {
	t.Parallel()
	plain := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("abcd", 1000) + `"}],"max_tokens":100}`
	const wantEstimate = 4000/4 + 100 // ⌈4000 bytes of text / 4⌉ + max_tokens
	for _, c := range requestCodings {
		for _, chunked := range []bool{false, true} {
			enc := encode(t, c.wrap, func(w io.Writer) { _, _ = io.WriteString(w, plain) })
			r := encodedRequest(enc, c.header, chunked)
			m, err := llmrate.ModelFromBody()(r)
			require.NoError(t, err, c.name)
			assert.Equal(t, "gpt-4o", m, "%s chunked=%v: the model of the decoded body", c.name, chunked)
			assert.Equal(t, int64(wantEstimate), llmrate.EstimateFromBody()(r), "%s chunked=%v: the estimate of the decoded body", c.name, chunked)
			if !chunked {
				assert.Equal(t, int64(len(enc)), r.ContentLength)
			}
			rest, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(enc, rest), "%s: the next handler reads the encoded body byte for byte", c.name)
		}
	}
}

// TestCompressedRequestBomb: a request body that decodes to far more than
// MaxModelBody (64 MiB of one byte, a few KiB encoded) is decoded no
// further than MaxModelBody: its facts are those of a body past the bound
// (no model; the estimate is Content-Length / 4), what it costs is bounded
// (measured as bytes allocated), and the next handler reads it whole.
func TestCompressedRequestBomb(t *testing.T) {
	prefix := `{"model":"gpt-4o","messages":[{"role":"user","content":"`
	zeros := bytes.Repeat([]byte("0"), 1<<20)
	for _, c := range requestCodings {
		enc := encode(t, c.wrap, func(w io.Writer) {
			_, _ = io.WriteString(w, prefix)
			for range 64 {
				_, _ = w.Write(zeros)
			}
			_, _ = io.WriteString(w, `"}]}`)
		})
		r := encodedRequest(enc, c.header, false)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := llmrate.ModelFromBody()(r)
		est := llmrate.EstimateFromBody()(r)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		assert.Equal(t, "", m, "%s: a body past the bound names no model", c.name)
		assert.Equal(t, max(1, int64(len(enc))/4), est, "%s: estimated as EstimateTokens does", c.name)
		// The decoded bytes held (1 MiB), the encoded ones read ahead, and
		// the decoder (zstd: a window of up to 8 MiB, as the response side).
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d KiB allocated", c.name, alloc>>10)
		assert.Less(t, alloc, uint64(12<<20), "%s: reading a 64 MiB bomb allocated %d KiB", c.name, alloc>>10)
		rest, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(enc, rest), "%s: the next handler reads the encoded body byte for byte", c.name)
	}
}

// TestUndecodableRequestEncoding: a body whose Content-Encoding cannot be
// decoded (an unsupported coding, a chain, a corrupt stream) takes the
// fallback: the model from the path or none, the estimate Content-Length /
// 4; the body passes on untouched.
func TestUndecodableRequestEncoding(t *testing.T) {
	t.Parallel()
	plain := `{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}`
	gz := encode(t, requestCodings[0].wrap, func(w io.Writer) { _, _ = io.WriteString(w, plain) })
	for _, c := range []struct {
		name, header string
		body         []byte
	}{
		{"unsupported", "compress", []byte("\x1f\x9d\x90{\"model\"")},
		{"chain", "gzip, br", gz},
		{"corrupt", "gzip", append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, bytes.Repeat([]byte{0xff}, 100)...)},
		{"truncated", "gzip", gz[:len(gz)/2]},
		{"plain JSON labelled gzip", "gzip", []byte(plain)},
	} {
		r := encodedRequest(c.body, c.header, false)
		m, err := llmrate.ModelFromBody()(r)
		require.NoError(t, err, c.name)
		assert.Equal(t, "", m, c.name)
		assert.Equal(t, max(1, int64(len(c.body))/4), llmrate.EstimateFromBody()(r), c.name)
		rest, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(c.body, rest), "%s: the body passes on untouched", c.name)
	}
	// Gemini's model in the path still counts.
	r := encodedRequest(gz, "compress", false)
	r.URL.Path = "/v1beta/models/gemini-2.5-flash:generateContent"
	m, err := llmrate.ModelFromBody()(r)
	require.NoError(t, err)
	assert.Equal(t, "gemini-2.5-flash", m)
}

// TestCompressedRequestBrotliLargeWindowBounded: the client chooses the
// brotli window of its request body. A bomb encoded with the largest
// standard window (lgwin 24, 16 MiB) must cost no more than the bound
// TestCompressedRequestBomb holds the other codings to (12 MiB: the
// decoded MiB, the encoded bytes, a decoder of at most an 8 MiB window as
// docs/known-limits.md states); a few KiB of request must not make the
// limiter allocate 16 MiB and more.
func TestCompressedRequestBrotliLargeWindowBounded(t *testing.T) {
	prefix := `{"model":"gpt-4o","messages":[{"role":"user","content":"`
	zeros := bytes.Repeat([]byte("0"), 1<<20)
	enc := encode(t, func(w io.Writer) io.WriteCloser {
		return brotli.NewWriterOptions(w, brotli.WriterOptions{Quality: 5, LGWin: 24})
	}, func(w io.Writer) {
		_, _ = io.WriteString(w, prefix)
		for range 64 {
			_, _ = w.Write(zeros)
		}
		_, _ = io.WriteString(w, `"}]}`)
	})
	r := encodedRequest(enc, "br", false)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := llmrate.ModelFromBody()(r)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	alloc := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, alloc, uint64(12<<20), "a %d-byte br request (lgwin 24) allocated %d KiB", len(enc), alloc>>10)
}
