package llmrate_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// encoders re-encode a fixture's identity bytes as a provider (or a CDN in
// front of it) would send them.
var encoders = []struct {
	coding string // the Content-Encoding header
	name   string
	enc    func(io.Writer) io.WriteCloser
}{
	{"deflate", "deflate-zlib", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }},
	{"deflate", "deflate-raw", func(w io.Writer) io.WriteCloser {
		fw, _ := flate.NewWriter(w, flate.DefaultCompression)
		return fw
	}},
	{"br", "br", func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) }},
	{"zstd", "zstd", func(w io.Writer) io.WriteCloser {
		zw, _ := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		return zw
	}},
	{"gzip", "gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
}

func encodeWith(t testing.TB, enc func(io.Writer) io.WriteCloser, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := enc(&buf)
	_, err := w.Write(body)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// identityBody returns a fixture's bytes without their Content-Encoding.
func identityBody(t testing.TB, f fixture) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(fixtureDir, f.File))
	require.NoError(t, err)
	if f.ContentEncoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		require.NoError(t, err)
		body, err = io.ReadAll(zr)
		require.NoError(t, err)
	}
	return body
}

// serve sends one request through a fresh limiter to a provider writing
// chunks with the given headers, and returns what the client got, the one
// reconcile event and the limiter.
func serve(t *testing.T, f fixture, chunks [][]byte, opts ...llmrate.Option) ([]byte, llmrate.ReconcileEvent, *llmrate.Limiter) {
	t.Helper()
	obs := &recorder{}
	h := newHarness(t, fixtureProvider(f, nil, chunks), append([]llmrate.Option{llmrate.WithObserver(obs)}, opts...)...)
	w := h.send("sk-encoded-secret-key", 4000)
	require.Equal(t, f.Status, w.Code)
	ev, n := obs.lastReconcile()
	require.Equal(t, 1, n, "exactly one reconcile")
	return w.Body.Bytes(), ev, h.lim
}

// randomPieces cuts p into pieces of random sizes in [1, maxLen].
func randomPieces(r *rand.Rand, p []byte, maxLen int) [][]byte {
	var out [][]byte
	for len(p) > 0 {
		n := min(len(p), 1+r.IntN(maxLen))
		out, p = append(out, p[:n]), p[n:]
	}
	return out
}

// TestFixturesEveryEncodingThroughMiddleware: every fixture, re-encoded as
// deflate (zlib and raw), br, zstd and gzip, reconciles through the real
// middleware exactly as its identity form does, for random write splits;
// the client gets the encoded bytes unchanged.
func TestFixturesEveryEncodingThroughMiddleware(t *testing.T) {
	t.Parallel()
	for _, f := range loadFixtures(t) {
		if f.Status == http.StatusNoContent {
			continue // no body to encode
		}
		t.Run(f.File, func(t *testing.T) {
			t.Parallel()
			plain := identityBody(t, f)
			idf := f
			idf.ContentEncoding = ""
			got, want, _ := serve(t, idf, [][]byte{plain})
			require.Equal(t, plain, got)
			require.NoError(t, want.Undecoded)
			if u, ok := wantUsage(f); ok {
				require.Equal(t, llmrate.ReconcileUsage, want.Kind, f.Note)
				require.Equal(t, u, want.Reported)
			}
			r := rand.New(rand.NewPCG(uint64(len(plain)), 12))
			for _, e := range encoders {
				encoded := encodeWith(t, e.enc, plain)
				ef := f
				ef.ContentEncoding = e.coding
				ways := [][][]byte{{encoded}, randomPieces(r, encoded, 97)}
				if len(plain) > 256<<10 {
					ways = [][][]byte{randomPieces(r, encoded, 16<<10)} // the 5 MB stream: one split of larger writes
				}
				for _, chunks := range ways {
					got, ev, lim := serve(t, ef, chunks)
					assert.True(t, bytes.Equal(encoded, got), "%s: the client got other bytes", e.name)
					assert.NoError(t, ev.Undecoded, e.name)
					assert.Zero(t, lim.Undecoded(), e.name)
					assert.Equal(t, want, ev, "%s in %d writes reconciles as identity does (%s)", e.name, len(chunks), f.Note)
				}
			}
		})
	}
}

// esMessages cuts an event stream into its messages by their prelude's
// total length.
func esMessages(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		require.GreaterOrEqual(t, len(b), 12)
		n := int(binary.BigEndian.Uint32(b))
		require.LessOrEqual(t, n, len(b))
		out, b = append(out, b[:n]), b[n:]
	}
	return out
}

func eventStreamFixture(t *testing.T, file string) (fixture, []byte) {
	t.Helper()
	for _, f := range loadFixtures(t) {
		if f.File == file {
			return f, identityBody(t, f)
		}
	}
	t.Fatalf("no fixture %s", file)
	return fixture{}, nil
}

// TestEventStreamsThroughMiddleware: Bedrock event streams reconcile as the
// manifest says when complete; cut anywhere (or ended mid-message by the
// upstream) they charge what the reference finds in their whole messages;
// an exception message makes every report
// partial and is named in the event.
func TestEventStreamsThroughMiddleware(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"bedrock-converse-stream.eventstream", "bedrock-invoke-anthropic-stream.eventstream", "bedrock-invoke-llama-stream.eventstream"} {
		f, body := eventStreamFixture(t, file)
		want, ok := wantUsage(f)
		require.True(t, ok)
		_, complete, _ := serve(t, f, [][]byte{body})
		assert.Equal(t, llmrate.ReconcileUsage, complete.Kind, file)
		assert.Equal(t, want, complete.Reported, file)
		assert.Equal(t, want.InputTokens+want.OutputTokens, complete.Actual, file)
		assert.False(t, complete.Cut, file)

		r := rand.New(rand.NewPCG(uint64(len(body)), 3))
		for range 30 {
			k := r.IntN(len(body))
			ev := charged(t, f.ContentType, "", f.Status, body[:k], true, 4000)
			assert.Equal(t, usageref.Body(f.ContentType, body[:k]).Charge(1000, true), ev.Actual, "%s cut at %d", file, k)
			assert.NotEqual(t, llmrate.ReconcileUsage, ev.Kind, "%s cut at %d", file, k)
			// The upstream ending the body mid-message, the handler
			// returning normally: cut all the same.
			ev = charged(t, f.ContentType, "", f.Status, body[:k], false, 4000)
			ref := usageref.Body(f.ContentType, body[:k])
			assert.Equal(t, ref.Charge(1000, false), ev.Actual, "%s ended at %d", file, k)
			assert.Equal(t, ref.Pending, ev.Cut, "%s ended at %d: cut only inside a message", file, k)
		}
	}

	// A complete ConverseStream followed by an exception message: the
	// metadata usage was seen, but the stream did not complete, so it is
	// partial: input 1061 + max(58, generated text ÷ 4).
	conv, body := eventStreamFixture(t, "bedrock-converse-stream.eventstream")
	_, exc := eventStreamFixture(t, "bedrock-converse-stream-exception.eventstream")
	msgs := esMessages(t, exc)
	withExc := append(bytes.Clone(body), msgs[len(msgs)-1]...)
	ev := charged(t, conv.ContentType, "", 200, withExc, false, 4000)
	assert.Equal(t, llmrate.ReconcilePartial, ev.Kind)
	assert.Equal(t, "modelStreamErrorException", ev.Exception)
	assert.True(t, ev.Cut)
	assert.Equal(t, int64(1061)+max(58, ev.GeneratedBytes/4), ev.Actual)
	assert.Equal(t, usageref.Body(conv.ContentType, withExc).Charge(1000, false), ev.Actual)
	assert.NoError(t, ev.Undecoded)

	// The exception fixture alone: no usage, the estimate plus its text.
	ef, ebody := eventStreamFixture(t, "bedrock-converse-stream-exception.eventstream")
	ev = charged(t, ef.ContentType, "", 200, ebody, false, 4000)
	assert.Equal(t, llmrate.ReconcileEstimated, ev.Kind)
	assert.Equal(t, "modelStreamErrorException", ev.Exception)
	assert.Equal(t, 1000+ev.GeneratedBytes/4, ev.Actual, "the look-alike 999999 in the exception is never read")
	assert.Positive(t, ev.GeneratedBytes)
}

// TestUndecodableBodiesLeaveTheEstimate: a body llmrate cannot decode (an
// unknown coding, a chain, corrupt br, a zstd frame with a 16 MiB window,
// a corrupt event stream) is relayed unchanged, leaves the estimate
// standing, and is reported: ReconcileEvent.Undecoded, Limiter.Undecoded,
// a debug log line without the key.
func TestUndecodableBodiesLeaveTheEstimate(t *testing.T) {
	t.Parallel()
	var jf fixture
	for _, f := range loadFixtures(t) {
		if f.File == "openai-chat.json" {
			jf = f
		}
	}
	require.NotEmpty(t, jf.File)
	plain := identityBody(t, jf) // reports usage: 19 + 10

	gzipped := encodeWith(t, encoders[4].enc, plain)
	br := encodeWith(t, encoders[2].enc, plain)
	corruptBr := bytes.Clone(br)
	for i := len(corruptBr) / 3; i < len(corruptBr); i++ {
		corruptBr[i] = 0xff
	}
	var zbuf bytes.Buffer
	zw, err := zstd.NewWriter(&zbuf, zstd.WithWindowSize(16<<20), zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	_, _ = zw.Write(plain)
	require.NoError(t, zw.Flush()) // a flush before the end: the header declares the window
	_, _ = zw.Write([]byte("\n"))
	require.NoError(t, zw.Close())
	bigWindow := zbuf.Bytes()
	require.Equal(t, 24, 10+int(bigWindow[5]>>3), "the frame header declares a 16 MiB window")

	_, conv := eventStreamFixture(t, "bedrock-converse-stream.eventstream")
	corruptES := bytes.Clone(conv)
	corruptES[len(corruptES)-1] ^= 0xff // the metadata message's CRC

	for _, tc := range []struct {
		name, ct, coding string
		body             []byte
		reason           usage.DecodeReason
	}{
		{"unknown coding", jf.ContentType, "compress", plain, usage.DecodeUnsupported},
		{"chain", jf.ContentType, "gzip, br", encodeWith(t, encoders[2].enc, gzipped), usage.DecodeChain},
		{"corrupt br", jf.ContentType, "br", corruptBr, usage.DecodeCorrupt},
		{"truncated br", jf.ContentType, "br", br[:len(br)/2], usage.DecodeTruncated},
		{"zstd 16 MiB window", jf.ContentType, "zstd", bigWindow, usage.DecodeWindowTooLarge},
		{"corrupt event stream", "application/vnd.amazon.eventstream", "", corruptES, usage.DecodeCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.DebugLevel)
			f := fixture{File: tc.name, ContentType: tc.ct, ContentEncoding: tc.coding, Status: 200}
			r := rand.New(rand.NewPCG(uint64(len(tc.body)), 5))
			got, ev, lim := serve(t, f, randomPieces(r, tc.body, 64), llmrate.WithLogger(zap.New(core)))
			assert.True(t, bytes.Equal(tc.body, got), "the client got other bytes")

			var de *llmrate.DecodeError
			require.True(t, errors.As(ev.Undecoded, &de), "Undecoded: %v", ev.Undecoded)
			if tc.reason == usage.DecodeCorrupt && de.Reason == usage.DecodeTruncated {
				de.Reason = usage.DecodeCorrupt // a corrupt stream may read as one cut short
			}
			assert.Equal(t, tc.reason, de.Reason, "%v", de)
			assert.True(t, ev.Cut, "a body not wholly decoded counts as cut")
			assert.Equal(t, int64(1), lim.Undecoded())
			if tc.ct == jf.ContentType {
				// Nothing of the one JSON document was read whole: the
				// estimate (4000 / 4) stands.
				assert.Equal(t, llmrate.ReconcileEstimated, ev.Kind)
				assert.Equal(t, int64(1000), ev.Actual)
			} else {
				// The event stream's six messages before the corrupt one
				// stand; its metadata usage is never read.
				assert.Equal(t, llmrate.ReconcileEstimated, ev.Kind)
				assert.Equal(t, usageref.Body(tc.ct, conv[:len(conv)-len(esMessages(t, conv)[6])]).Charge(1000, true), ev.Actual)
			}

			entries := logs.FilterMessage("llmrate: response body not decoded").All()
			require.Len(t, entries, 1)
			line := entries[0].ContextMap()
			assert.Equal(t, llmrate.Fingerprint("sk-encoded-secret-key"), line["key_fp"])
			assert.Contains(t, line["error"], tc.coding)
			for _, e := range logs.All() {
				for k, v := range e.ContextMap() {
					assert.NotContains(t, strings.ToLower(toString(v)), "sk-encoded-secret-key", "log field %s", k)
				}
			}
		})
	}
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}
