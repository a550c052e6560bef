package llmrate_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// encodingUpstream is an OpenAI-style streaming provider (a usage-only
// chunk only when include_usage is set) that compresses its stream with
// enc when the request's Accept-Encoding lists coding, as servers and CDNs
// do, or always when obey is false. It records the request body and
// Accept-Encoding it got.
func encodingUpstream(coding string, enc func(io.Writer) io.WriteCloser, obey bool, gotBody, gotAE *string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		*gotBody, *gotAE = string(b), r.Header.Get("Accept-Encoding")
		var req struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		_ = json.Unmarshal(b, &req)
		var sse bytes.Buffer
		sse.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n")
		if req.StreamOptions.IncludeUsage {
			sse.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":22,"total_tokens":33}}` + "\n\n")
		}
		sse.WriteString("data: [DONE]\n\n")
		w.Header().Set("Content-Type", "text/event-stream")
		if !obey || strings.Contains(r.Header.Get("Accept-Encoding"), coding) {
			w.Header().Set("Content-Encoding", coding)
			ew := enc(w)
			_, _ = ew.Write(sse.Bytes())
			_ = ew.Close()
			return
		}
		_, _ = w.Write(sse.Bytes())
	})
}

// clientDecode decodes a response body as the client would, by its
// Content-Encoding (raw is the deflate variant the upstream used).
func clientDecode(t *testing.T, w *httptest.ResponseRecorder, raw bool) string {
	t.Helper()
	var r io.Reader = w.Body
	var err error
	switch w.Header().Get("Content-Encoding") {
	case "":
	case "gzip":
		r, err = gzip.NewReader(r)
	case "deflate":
		if raw {
			r = flate.NewReader(r)
		} else {
			r, err = zlib.NewReader(r)
		}
	case "br":
		r = brotli.NewReader(r)
	case "zstd":
		var d *zstd.Decoder
		d, err = zstd.NewReader(r)
		if err == nil {
			defer d.Close()
			r = d
		}
	default:
		t.Fatalf("unexpected Content-Encoding %q", w.Header().Get("Content-Encoding"))
	}
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

const streamBody = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// TestStreamUsageHiddenWhateverTheEncoding: issue 18 item 12. A client that
// accepts a compressed response (every encoding llmrate reads) and did not
// ask for usage never sees the usage-only chunk that WithStreamUsage asked
// for, and the request is still charged its reported usage (33). The
// upstream is asked for identity, which every client accepts.
func TestStreamUsageHiddenWhateverTheEncoding(t *testing.T) {
	t.Parallel()
	for _, e := range encoders {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			var body, ae string
			obs := &recorder{}
			h := newHarness(t, encodingUpstream(e.coding, e.enc, true, &body, &ae), llmrate.WithStreamUsage(), llmrate.WithObserver(obs))
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(streamBody))
			r.Header.Set("Authorization", "Bearer sk-enc")
			r.Header.Set("Accept-Encoding", e.coding+", identity;q=0.5")
			w := httptest.NewRecorder()
			h.h.ServeHTTP(w, r)
			require.Equal(t, http.StatusOK, w.Code)
			got := clientDecode(t, w, e.name == "deflate-raw")
			assert.Contains(t, body, `"include_usage":true`, "usage asked of the upstream")
			assert.NotContains(t, got, "prompt_tokens", "the client never sees the usage chunk it did not ask for")
			assert.NotContains(t, got, `"choices":[]`)
			assert.Contains(t, got, `"content":"hi"`)
			assert.Contains(t, got, "data: [DONE]")
			ev, n := obs.lastReconcile()
			require.Equal(t, 1, n)
			assert.Equal(t, llmrate.ReconcileUsage, ev.Kind)
			assert.Equal(t, int64(33), ev.Actual, "usage still counts")
			assert.Zero(t, h.lim.StreamUsageShown())
		})
	}
}

// TestStreamUsageIdentity: a client that sends no Accept-Encoding gets the
// stream filtered as before, and the upstream is asked for identity.
func TestStreamUsageIdentity(t *testing.T) {
	t.Parallel()
	var body, ae string
	obs := &recorder{}
	h := newHarness(t, encodingUpstream("gzip", encoders[len(encoders)-1].enc, true, &body, &ae), llmrate.WithStreamUsage(), llmrate.WithObserver(obs))
	w := sendBody(t, h.h, "/v1/chat/completions", streamBody)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, w.Header().Get("Content-Encoding"))
	assert.Equal(t, "identity", ae)
	assert.NotContains(t, w.Body.String(), "prompt_tokens")
	assert.Contains(t, w.Body.String(), "data: [DONE]")
	ev, _ := obs.lastReconcile()
	assert.Equal(t, int64(33), ev.Actual)
}

// TestStreamUsageClientRefusesIdentity: a client that refuses identity
// keeps its Accept-Encoding and its body untouched (no usage asked on its
// behalf, so no chunk to hide); a client that asked for usage itself keeps
// its Accept-Encoding and gets its chunk, compressed.
func TestStreamUsageClientRefusesIdentity(t *testing.T) {
	t.Parallel()
	gz := encoders[len(encoders)-1]
	for _, aeIn := range []string{"gzip, identity;q=0", "gzip;q=1.0, *;q=0", "gzip, IDENTITY; q=0.000"} {
		var body, ae string
		h := newHarness(t, encodingUpstream("gzip", gz.enc, true, &body, &ae), llmrate.WithStreamUsage())
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(streamBody))
		r.Header.Set("Authorization", "Bearer sk-enc")
		r.Header.Set("Accept-Encoding", aeIn)
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		assert.Equal(t, streamBody, body, "%q: forwarded untouched", aeIn)
		assert.Equal(t, aeIn, ae)
		assert.Equal(t, "gzip", w.Header().Get("Content-Encoding"))
		assert.NotContains(t, clientDecode(t, w, false), "prompt_tokens")
	}
	// "*;q=0" with identity listed accepts identity: injected.
	var body, ae string
	h := newHarness(t, encodingUpstream("gzip", gz.enc, true, &body, &ae), llmrate.WithStreamUsage())
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(streamBody))
	r.Header.Set("Authorization", "Bearer sk-enc")
	r.Header.Set("Accept-Encoding", "gzip, identity, *;q=0")
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	assert.Contains(t, body, `"include_usage":true`)
	assert.Equal(t, "identity", ae)
	assert.NotContains(t, clientDecode(t, w, false), "prompt_tokens")

	asked := `{"stream":true,"stream_options":{"include_usage":true}}`
	r = httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(asked))
	r.Header.Set("Authorization", "Bearer sk-enc")
	r.Header.Set("Accept-Encoding", "gzip")
	w = httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	assert.Equal(t, "gzip", ae, "a client that asked for usage keeps its Accept-Encoding")
	assert.Contains(t, clientDecode(t, w, false), `"prompt_tokens":11`)
}

// TestStreamUsageUpstreamIgnoresIdentity: an upstream that compresses the
// stream although asked for identity is relayed byte for byte (usage chunk
// included: it cannot be dropped from compressed bytes), its usage still
// counts, and the shown chunk is counted.
func TestStreamUsageUpstreamIgnoresIdentity(t *testing.T) {
	t.Parallel()
	var body, ae string
	obs := &recorder{}
	gz := encoders[len(encoders)-1]
	core, logs := observer.New(zapcore.WarnLevel)
	h := newHarness(t, encodingUpstream("gzip", gz.enc, false, &body, &ae), llmrate.WithStreamUsage(), llmrate.WithObserver(obs), llmrate.WithLogger(zap.New(core)))
	w := sendBody(t, h.h, "/v1/chat/completions", streamBody)
	assert.Equal(t, "identity", ae)
	assert.Contains(t, clientDecode(t, w, false), "prompt_tokens", "relayed as sent")
	ev, _ := obs.lastReconcile()
	assert.Equal(t, int64(33), ev.Actual)
	assert.Equal(t, int64(1), h.lim.StreamUsageShown())
	require.Equal(t, 1, logs.Len(), "logged")
	entry := logs.All()[0]
	assert.Equal(t, "gzip", entry.ContextMap()["content_encoding"])
	assert.NotContains(t, fmt.Sprint(entry.Message, entry.ContextMap()), "sk-su", "never the raw key")
}
