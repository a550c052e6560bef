package usage

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The memory each coding may allocate while decoding one body, as the
// comment at the top of decode.go states it (the feed, its channels and
// the test's sink included).
const (
	deflateMemBound = 192 << 10
	brotliMemBound  = 16<<20 + 512<<10
	zstdMemBound    = maxZstdWindow + 1<<20
)

func memBound(c coding) uint64 {
	switch c {
	case codingBrotli:
		return brotliMemBound
	case codingZstd:
		return zstdMemBound
	}
	return deflateMemBound
}

// encodings lists every way the tests encode a body: the Content-Encoding
// header value to present, the coding it selects, and an encoder built
// from the libraries' writers (not the decoders under test).
var encodings = []struct {
	name   string
	header string
	coding coding
	enc    func(w io.Writer) io.WriteCloser
}{
	{"gzip", "gzip", codingGzip, func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
	{"x-gzip", "x-gzip", codingGzip, func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
	{"deflate-zlib", "deflate", codingDeflate, func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }},
	{"deflate-raw", "deflate", codingDeflate, func(w io.Writer) io.WriteCloser {
		fw, _ := flate.NewWriter(w, flate.DefaultCompression)
		return fw
	}},
	{"br", "br", codingBrotli, func(w io.Writer) io.WriteCloser { return brotli.NewWriterLevel(w, 5) }},
	{"zstd", "zstd", codingZstd, func(w io.Writer) io.WriteCloser {
		zw, _ := zstd.NewWriter(w, zstd.WithWindowSize(maxZstdWindow), zstd.WithEncoderConcurrency(1))
		return zw
	}},
}

// flusher is implemented by every encoder above.
type flusher interface{ Flush() error }

func encodeAll(t testing.TB, enc func(io.Writer) io.WriteCloser, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := enc(&buf)
	_, err := w.Write(body)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// identityFixtures returns every body in testdata/usage that the manifest
// lists without a Content-Encoding.
func identityFixtures(t testing.TB) map[string][]byte {
	t.Helper()
	dir := filepath.Join("..", "testdata", "usage")
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var m struct {
		Fixtures []struct {
			File            string `json:"file"`
			ContentEncoding string `json:"content_encoding"`
		} `json:"fixtures"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	out := make(map[string][]byte)
	for _, f := range m.Fixtures {
		if f.ContentEncoding != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, f.File))
		require.NoError(t, err)
		out[f.File] = b
	}
	require.NotEmpty(t, out)
	return out
}

// splits cuts p into consecutive pieces of random sizes in [1, max].
func splits(rng *rand.Rand, p []byte, maxLen int) [][]byte {
	var out [][]byte
	for len(p) > 0 {
		n := min(1+rng.IntN(maxLen), len(p))
		out = append(out, p[:n])
		p = p[n:]
	}
	return out
}

// decodeThrough pushes pieces through a feed for header and returns what
// the sink received and close's error. It also checks that no piece was
// changed by the feed.
func decodeThrough(t testing.TB, header string, pieces [][]byte) ([]byte, error) {
	t.Helper()
	var got bytes.Buffer
	f, err := newDecodeFeed(header, func(p []byte) { got.Write(p) })
	require.NoError(t, err, "newDecodeFeed(%q)", header)
	for _, p := range pieces {
		before := bytes.Clone(p)
		f.write(p)
		require.Equal(t, before, p, "write(%q) changed the caller's bytes", header)
	}
	err = f.close()
	return got.Bytes(), err
}

func TestDecodeFeedFixturesEveryEncoding(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fixtures := identityFixtures(t)
	rng := rand.New(rand.NewPCG(12, 34))
	for _, e := range encodings {
		if e.name == "x-gzip" {
			continue // the same decoder as gzip
		}
		t.Run(e.name, func(t *testing.T) {
			for name, body := range fixtures {
				if len(body) > 1<<20 {
					continue // TestDecodeFeedLargeFixture
				}
				enc := encodeAll(t, e.enc, body)
				cuts := [][][]byte{{enc}, splits(rng, enc, 7)}
				if len(enc) <= 2<<10 {
					cuts = append(cuts, splits(rng, enc, 1))
				}
				for i, pieces := range cuts {
					got, err := decodeThrough(t, e.header, pieces)
					require.NoError(t, err, "%s as %s, split %d", name, e.name, i)
					require.True(t, bytes.Equal(body, got), "%s as %s, split %d: decoded %d bytes, want %d", name, e.name, i, len(got), len(body))
				}
			}
		})
	}
}

// TestDecodeFeedLargeFixture decodes the 5 MB stream as deflate (the
// decoder gzip shares), br and zstd, encoded at the encoders' fastest
// settings: the test is about a long stream through the feed, not about
// compression ratios.
func TestDecodeFeedLargeFixture(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	body, err := os.ReadFile(filepath.Join("..", "testdata", "usage", "large-openai-chat-stream-5mb.sse"))
	require.NoError(t, err)
	fast := []struct {
		header string
		enc    func(io.Writer) io.WriteCloser
	}{
		{"deflate", func(w io.Writer) io.WriteCloser { fw, _ := flate.NewWriter(w, flate.BestSpeed); return fw }},
		{"br", func(w io.Writer) io.WriteCloser { return brotli.NewWriterLevel(w, brotli.BestSpeed) }},
		{"zstd", func(w io.Writer) io.WriteCloser {
			zw, _ := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
			return zw
		}},
	}
	rng := rand.New(rand.NewPCG(56, 78))
	for _, e := range fast {
		enc := encodeAll(t, e.enc, body)
		got, err := decodeThrough(t, e.header, splits(rng, enc, 32<<10))
		require.NoError(t, err, e.header)
		require.True(t, bytes.Equal(body, got), "%s: decoded %d bytes, want %d", e.header, len(got), len(body))
	}
}

func TestDecodeFeedIdentityPassesSlicesThrough(t *testing.T) {
	for _, header := range []string{"", "identity", " Identity ", "identity, identity", ","} {
		var got [][]byte
		f, err := newDecodeFeed(header, func(p []byte) { got = append(got, p) })
		require.NoError(t, err, "newDecodeFeed(%q)", header)
		in := []byte("data: {}\n\n")
		f.write(in)
		require.NoError(t, f.close())
		require.Len(t, got, 1)
		assert.Same(t, &in[0], &got[0][0], "identity %q hands on the written slice itself", header)
	}
}

func TestDecodeFeedCommittedGzipFixtures(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := filepath.Join("..", "testdata", "usage")
	names, err := filepath.Glob(filepath.Join(dir, "*.gz"))
	require.NoError(t, err)
	require.NotEmpty(t, names)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, name := range names {
		enc, err := os.ReadFile(name)
		require.NoError(t, err)
		zr, err := gzip.NewReader(bytes.NewReader(enc))
		require.NoError(t, err)
		want, err := io.ReadAll(zr)
		require.NoError(t, err)
		got, err := decodeThrough(t, "gzip", splits(rng, enc, 3))
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
}

func TestDecodeFeedCodingHeader(t *testing.T) {
	cases := []struct {
		header string
		coding coding
		reason DecodeReason
	}{
		{"", codingIdentity, 0},
		{"gzip", codingGzip, 0},
		{" GZip ", codingGzip, 0},
		{"X-GZIP", codingGzip, 0},
		{"deflate", codingDeflate, 0},
		{"BR", codingBrotli, 0},
		{"zstd", codingZstd, 0},
		{"identity, br", codingBrotli, 0},
		{"br,", codingBrotli, 0},
		{"gzip, br", 0, DecodeChain},
		{"gzip,gzip", 0, DecodeChain},
		{"compress", 0, DecodeUnsupported},
		{"x-compress", 0, DecodeUnsupported},
		{"gzip;q=1", 0, DecodeUnsupported},
		{"br, lzma", 0, DecodeUnsupported},
	}
	for _, tc := range cases {
		f, err := newDecodeFeed(tc.header, func([]byte) {})
		if tc.reason == 0 {
			require.NoError(t, err, "newDecodeFeed(%q)", tc.header)
			assert.Equal(t, tc.coding, f.coding, "newDecodeFeed(%q)", tc.header)
			require.NoError(t, f.close())
			continue
		}
		var de *DecodeError
		require.ErrorAs(t, err, &de, "newDecodeFeed(%q)", tc.header)
		assert.Equal(t, tc.reason, de.Reason, "newDecodeFeed(%q)", tc.header)
		assert.Nil(t, f)
		assert.Contains(t, de.Error(), "encoding not decoded: ")
	}
}

func TestDecodeFeedEmptyBodyStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, e := range encodings {
		f, err := newDecodeFeed(e.header, func([]byte) { t.Fatal("sink called for an empty body") })
		require.NoError(t, err)
		f.write(nil)
		f.write([]byte{})
		assert.NoError(t, f.close(), "%s: a body with no bytes is no error (HEAD, 204, 304)", e.name)
		assert.False(t, f.started, e.name)
	}
}

// TestDecodeFeedFlushedEventsArriveBeforeClose checks that a stream whose
// encoder flushes after every event has each event decoded by the time the
// write carrying its flush returns, so usage in a long stream is seen as it
// passes and nothing waits for the end of the body.
func TestDecodeFeedFlushedEventsArriveBeforeClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
		"data: {\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n",
		"data: [DONE]\n\n",
	}
	for _, e := range encodings {
		var buf bytes.Buffer
		w := e.enc(&buf)
		var chunks [][]byte
		for _, ev := range events {
			_, err := w.Write([]byte(ev))
			require.NoError(t, err)
			require.NoError(t, w.(flusher).Flush())
			chunks = append(chunks, bytes.Clone(buf.Bytes()))
			buf.Reset()
		}
		require.NoError(t, w.Close())
		tail := bytes.Clone(buf.Bytes())

		var got bytes.Buffer
		f, err := newDecodeFeed(e.header, func(p []byte) { got.Write(p) })
		require.NoError(t, err)
		want := ""
		for i, c := range chunks {
			f.write(c)
			want += events[i]
			assert.Equal(t, want, got.String(), "%s: after the flush of event %d", e.name, i)
		}
		f.write(tail)
		require.NoError(t, f.close(), e.name)
		assert.Equal(t, want, got.String(), e.name)
	}
}

func TestDecodeFeedTruncatedAndCorrupt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	body := bytes.Repeat([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a fairly long line of text\"}}]}\n\n"), 400)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, e := range encodings {
		enc := encodeAll(t, e.enc, body)
		// Cut anywhere before the end: never a panic, always reported as
		// truncated, and what came out is a prefix of the body.
		for _, at := range []int{1, 2, len(enc) / 3, len(enc) / 2, len(enc) - 1} {
			got, err := decodeThrough(t, e.header, splits(rng, enc[:at], 50))
			var de *DecodeError
			require.ErrorAs(t, err, &de, "%s cut at %d of %d", e.name, at, len(enc))
			assert.Equal(t, DecodeTruncated, de.Reason, "%s cut at %d: %v", e.name, at, err)
			assert.True(t, bytes.HasPrefix(body, got), "%s cut at %d: output is a prefix of the body", e.name, at)
		}
		// Random byte flips: never a panic; an error is a *DecodeError.
		for range 30 {
			bad := bytes.Clone(enc)
			for range 1 + rng.IntN(4) {
				bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
			}
			_, err := decodeThrough(t, e.header, splits(rng, bad, 100))
			if err != nil {
				var de *DecodeError
				require.ErrorAs(t, err, &de, e.name)
				assert.Contains(t, []DecodeReason{DecodeCorrupt, DecodeTruncated, DecodeWindowTooLarge}, de.Reason, "%s: %v", e.name, err)
			}
		}
		// Garbage after the stream is reported where the decoder sees
		// it (gzip and zstd read on for another member or frame).
		if e.coding == codingGzip || e.coding == codingZstd {
			got, err := decodeThrough(t, e.header, [][]byte{enc, []byte("garbage after the end")})
			var de *DecodeError
			require.ErrorAs(t, err, &de, e.name)
			assert.Equal(t, DecodeCorrupt, de.Reason, e.name)
			assert.Equal(t, body, got, "%s: everything before the garbage was decoded", e.name)
		}
	}
	// Not the declared coding at all.
	for _, header := range []string{"gzip", "deflate", "br", "zstd"} {
		_, err := decodeThrough(t, header, [][]byte{[]byte("{\"usage\":{\"prompt_tokens\":1}}\n plain JSON, not encoded")})
		var de *DecodeError
		require.ErrorAs(t, err, &de, header)
		assert.Equal(t, DecodeCorrupt, de.Reason, "%s over plain text: %v", header, err)
	}
}

func TestDecodeFeedGzipChecksumMismatch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	body := []byte(`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	enc := encodeAll(t, encodings[0].enc, body)
	enc[len(enc)-8] ^= 0xff // first CRC-32 byte of the trailer (RFC 1952)
	got, err := decodeThrough(t, "gzip", [][]byte{enc})
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, DecodeCorrupt, de.Reason)
	assert.ErrorIs(t, err, gzip.ErrChecksum)
	assert.Equal(t, body, got, "the bytes were decoded before the trailer was checked; they are kept")
}

// zstdFrameHeader returns a zstd frame header (RFC 8878 §3.1.1) with no
// content size, no checksum and no dictionary, declaring a window of
// 2^windowLog bytes.
func zstdFrameHeader(windowLog int) []byte {
	h := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	return append(h, 0x00, byte(windowLog-10)<<3)
}

// zstdRLEBlock returns a block repeating b n times (n <= 128 KiB).
func zstdRLEBlock(b byte, n int, last bool) []byte {
	hdr := uint32(n)<<3 | 1<<1 // Block_Type 1: RLE
	if last {
		hdr |= 1
	}
	return []byte{byte(hdr), byte(hdr >> 8), byte(hdr >> 16), b}
}

func TestDecodeFeedZstdWindow(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	body := []byte("data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n")

	// Hand-made frames: 8 MiB accepted, 16 MiB refused before any output.
	for _, tc := range []struct {
		windowLog int
		ok        bool
	}{{20, true}, {23, true}, {24, false}, {30, false}} {
		frame := append(zstdFrameHeader(tc.windowLog), zstdRLEBlock('x', 1000, true)...)
		got, err := decodeThrough(t, "zstd", [][]byte{frame})
		if tc.ok {
			require.NoError(t, err, "window 2^%d", tc.windowLog)
			assert.Equal(t, bytes.Repeat([]byte("x"), 1000), got)
			continue
		}
		var de *DecodeError
		require.ErrorAs(t, err, &de, "window 2^%d", tc.windowLog)
		assert.Equal(t, DecodeWindowTooLarge, de.Reason, "window 2^%d: %v", tc.windowLog, err)
		assert.Empty(t, got, "window 2^%d", tc.windowLog)
	}

	// A single-segment frame has no window descriptor: its window is its
	// content size (RFC 8878 §3.1.1.1.2), so one above 8 MiB is refused
	// too, before anything is allocated for it.
	for _, tc := range []struct {
		size uint32
		ok   bool
	}{{1000, true}, {8 << 20, true}, {8<<20 + 1, false}, {1 << 30, false}} {
		frame := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
		frame = append(frame, 0xA0) // Single_Segment_flag, 4-byte Frame_Content_Size
		frame = binary.LittleEndian.AppendUint32(frame, tc.size)
		for left := int(tc.size); left > 0; {
			n := min(left, 128<<10)
			left -= n
			frame = append(frame, zstdRLEBlock('y', n, left == 0)...)
		}
		var sink countingSink
		f, err := newDecodeFeed("zstd", sink.write)
		require.NoError(t, err)
		f.write(frame)
		err = f.close()
		if tc.ok {
			require.NoError(t, err, "single segment of %d bytes", tc.size)
			assert.Equal(t, int64(tc.size), sink.n)
			continue
		}
		var de *DecodeError
		require.ErrorAs(t, err, &de, "single segment of %d bytes", tc.size)
		assert.Equal(t, DecodeWindowTooLarge, de.Reason, "single segment of %d bytes: %v", tc.size, err)
		assert.Zero(t, sink.n)
	}

	// The library's own encoder streaming with a 16 MiB window: a flush
	// before the end makes it write the window into the frame header
	// rather than a single-segment frame sized to the content.
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(16<<20), zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	_, err = zw.Write(bytes.Repeat(body, 1000))
	require.NoError(t, err)
	require.NoError(t, zw.Flush())
	_, err = zw.Write(body)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	enc := buf.Bytes()
	require.Zero(t, enc[4]&(1<<5), "the frame is not single-segment")
	require.Equal(t, 24, 10+int(enc[5]>>3), "the frame header declares a 16 MiB window")
	_, err = decodeThrough(t, "zstd", [][]byte{enc})
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, DecodeWindowTooLarge, de.Reason, "%v", err)
}

// allocatedDuring returns how many bytes of heap fn allocated.
func allocatedDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// countingSink counts decoded bytes without keeping them.
type countingSink struct{ n int64 }

func (s *countingSink) write(p []byte) { s.n += int64(len(p)) }

// gzipZeroBomb returns a gzip stream of about 1 GiB of zeros (about 1 MiB
// long) without ever holding the zeros: one flushed block of 1 MiB of
// zeros, repeated (every later block only copies from the window, which
// holds zeros), then an empty final block. The trailer's CRC is not that of
// the content; the decoder is expected to stop long before it.
func gzipZeroBomb(t testing.TB, mib int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	_, err = zw.Write(zeros)
	require.NoError(t, err)
	require.NoError(t, zw.Flush())
	head := bytes.Clone(buf.Bytes())
	buf.Reset()
	_, err = zw.Write(zeros)
	require.NoError(t, err)
	require.NoError(t, zw.Flush())
	block := bytes.Clone(buf.Bytes())
	buf.Reset()
	require.NoError(t, zw.Close())
	out := head
	for range mib - 1 {
		out = append(out, block...)
	}
	return append(out, buf.Bytes()...)
}

// zstdZeroBomb returns one zstd frame with an 8 MiB window holding mib MiB
// of zeros as RLE blocks: 32 bytes per MiB.
func zstdZeroBomb(mib int) []byte {
	out := zstdFrameHeader(23)
	n := mib * 8 // 128 KiB blocks
	for i := range n {
		out = append(out, zstdRLEBlock(0, 128<<10, i == n-1)...)
	}
	return out
}

func TestDecodeFeedBombStopsAtLimitInBoundedMemory(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	bombs := []struct {
		name   string
		header string
		coding coding
		enc    []byte
	}{
		{"gzip 1 GiB of zeros", "gzip", codingGzip, gzipZeroBomb(t, 1024)},
		{"zstd 1 GiB of zeros", "zstd", codingZstd, zstdZeroBomb(1024)},
	}
	for _, b := range bombs {
		require.Less(t, len(b.enc), 2<<20, b.name)
		var sink countingSink
		var err error
		pieces := splits(rand.New(rand.NewPCG(1, 2)), b.enc, 64<<10)
		alloc := allocatedDuring(func() {
			f, ferr := newDecodeFeed(b.header, sink.write)
			require.NoError(t, ferr)
			for _, p := range pieces {
				f.write(p)
			}
			err = f.close()
		})
		var de *DecodeError
		require.ErrorAs(t, err, &de, b.name)
		assert.Equal(t, DecodeLimit, de.Reason, b.name)
		assert.Equal(t, int64(maxDecodedBytes), sink.n, "%s: decoding stops exactly at the cap", b.name)
		assert.LessOrEqual(t, alloc, memBound(b.coding), "%s: allocated %d bytes", b.name, alloc)
		t.Logf("%s: %d compressed bytes, %d decoded, %d bytes allocated", b.name, len(b.enc), sink.n, alloc)
	}

	// Every encoder's own bomb, with a lowered cap so that it can be made
	// with the real encoders in a few milliseconds.
	zeros := make([]byte, 1<<20)
	bombers := append(encodings[:len(encodings):len(encodings)], struct {
		name   string
		header string
		coding coding
		enc    func(w io.Writer) io.WriteCloser
	}{"br, 16 MiB window", "br", codingBrotli, func(w io.Writer) io.WriteCloser {
		return brotli.NewWriterOptions(w, brotli.WriterOptions{Quality: 1, LGWin: 24})
	}})
	for _, e := range bombers {
		var buf bytes.Buffer
		w := e.enc(&buf)
		for range 2 {
			_, err := w.Write(zeros)
			require.NoError(t, err)
		}
		require.NoError(t, w.Close())
		var sink countingSink
		var err error
		alloc := allocatedDuring(func() {
			f, ferr := newDecodeFeed(e.header, sink.write)
			require.NoError(t, ferr)
			f.limit = 512 << 10
			f.write(buf.Bytes())
			err = f.close()
		})
		var de *DecodeError
		require.ErrorAs(t, err, &de, e.name)
		assert.Equal(t, DecodeLimit, de.Reason, e.name)
		assert.Equal(t, int64(512<<10), sink.n, e.name)
		assert.LessOrEqual(t, alloc, memBound(e.coding), "%s: allocated %d bytes", e.name, alloc)
		t.Logf("%s: 2 MiB of zeros in %d bytes, %d decoded, %d bytes allocated", e.name, buf.Len(), sink.n, alloc)
	}
}

func TestDecodeReasonString(t *testing.T) {
	for r := DecodeUnsupported; r <= DecodeMessageTooLarge; r++ {
		assert.NotContains(t, r.String(), "DecodeReason(", "reason %d has text", r)
	}
	assert.Equal(t, "DecodeReason(99)", DecodeReason(99).String())
	err := &DecodeError{Coding: "zstd", Reason: DecodeWindowTooLarge, Err: zstd.ErrWindowSizeExceeded}
	assert.Equal(t, `llmrate: encoding not decoded: zstd window above 8 MiB ("zstd"): `+zstd.ErrWindowSizeExceeded.Error(), err.Error())
	assert.True(t, errors.Is(err, zstd.ErrWindowSizeExceeded))
}

// FuzzDecodeFeed decodes arbitrary bytes as each coding, split at random:
// it must never panic, never allocate past the coding's bound, never
// decode past the cap, never change the caller's bytes, and report any
// failure as a *DecodeError.
func FuzzDecodeFeed(f *testing.F) {
	body := []byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n")
	for i, e := range encodings {
		enc := encodeAll(f, e.enc, body)
		f.Add(uint8(i), enc, uint64(i))
		f.Add(uint8(i), enc[:len(enc)/2], uint64(i+1))
	}
	f.Add(uint8(5), zstdZeroBomb(2), uint64(3))
	f.Add(uint8(0), gzipZeroBomb(f, 2), uint64(4))
	f.Fuzz(func(t *testing.T, which uint8, data []byte, seed uint64) {
		e := encodings[int(which)%len(encodings)]
		orig := bytes.Clone(data)
		const limit = 1 << 20
		var sink countingSink
		var err error
		pieces := splits(rand.New(rand.NewPCG(seed, seed>>1)), data, 1+int(seed%512))
		alloc := allocatedDuring(func() {
			fd, ferr := newDecodeFeed(e.header, sink.write)
			if ferr != nil {
				t.Fatal(ferr)
			}
			fd.limit = limit
			for _, p := range pieces {
				fd.write(p)
			}
			err = fd.close()
		})
		if !bytes.Equal(orig, data) {
			t.Fatalf("%s: the input bytes were modified", e.name)
		}
		if sink.n > limit {
			t.Fatalf("%s: decoded %d bytes past the %d cap", e.name, sink.n, limit)
		}
		// Allocation is measured cumulatively, so input-sized garbage
		// (one gzip extra field per member, each freed before the next)
		// is allowed for on top of the peak bound.
		if bound := memBound(e.coding) + uint64(len(data)); alloc > bound {
			t.Fatalf("%s: allocated %d bytes, bound %d", e.name, alloc, bound)
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("%s: error %T is not a *DecodeError: %v", e.name, err, err)
			}
		}
	})
}

func TestDecodeFeedFailedIsExactBetweenWrites(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	body := []byte(`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	for _, e := range encodings {
		enc := encodeAll(t, e.enc, body)
		f, err := newDecodeFeed(e.header, func([]byte) {})
		require.NoError(t, err)
		f.write(enc[:len(enc)/2])
		assert.False(t, f.failed(), "%s: half a valid stream has not failed", e.name)
		f.write([]byte("\xff\xff\xff\xff\xff\xff\xff\xff not the rest of the stream"))
		assert.True(t, f.failed(), "%s: the failure is known when write returns", e.name)
		f.write(enc[len(enc)/2:]) // dropped
		var de *DecodeError
		require.ErrorAs(t, f.close(), &de, e.name)
	}
}

func TestDecodeFeedPanicEndsOnlyThisBody(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	enc := encodeAll(t, encodings[0].enc, []byte("data: {}\n\n"))
	f, err := newDecodeFeed("gzip", func([]byte) { panic("sink bug") })
	require.NoError(t, err)
	f.write(enc)
	f.write(enc) // dropped: decoding has ended
	var de *DecodeError
	require.ErrorAs(t, f.close(), &de)
	assert.Equal(t, DecodeCorrupt, de.Reason)
	assert.Contains(t, de.Error(), "decoder panic: sink bug")
}

func TestDecodeFeedGzipExtraFieldWithinBound(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	body := []byte(`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Extra = make([]byte, 65535) // the largest extra field a header can declare
	_, err := zw.Write(body)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	var got bytes.Buffer
	var ferr error
	alloc := allocatedDuring(func() {
		f, err := newDecodeFeed("gzip", func(p []byte) { got.Write(p) })
		require.NoError(t, err)
		f.write(buf.Bytes())
		ferr = f.close()
	})
	require.NoError(t, ferr)
	assert.Equal(t, body, got.Bytes())
	assert.LessOrEqual(t, alloc, uint64(deflateMemBound), "allocated %d bytes", alloc)
}
