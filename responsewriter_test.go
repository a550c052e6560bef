package llmrate_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// fixtureProvider serves a fixture body with its status and headers, cut
// into writes by chunks, or through io.Copy (ReadFrom) when chunks is nil.
func fixtureProvider(f fixture, body []byte, chunks [][]byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.ContentType != "" {
			w.Header().Set("Content-Type", f.ContentType)
		}
		if f.ContentEncoding != "" {
			w.Header().Set("Content-Encoding", f.ContentEncoding)
		}
		w.WriteHeader(f.Status)
		if chunks == nil {
			_, _ = io.Copy(w, struct{ io.Reader }{bytes.NewReader(body)}) // hide WriterTo: exercise ReadFrom
			return
		}
		for _, c := range chunks {
			_, _ = w.Write(c)
			if fl, ok := w.(http.Flusher); ok {
				fl.Flush()
			}
		}
	})
}

// TestFixturesThroughMiddleware feeds every fixture through the real
// middleware and ResponseWriter wrapper, in many write splits and via
// io.Copy/ReadFrom on a real server: the reconcile sees exactly the
// expected usage and the client gets the body byte for byte.
func TestFixturesThroughMiddleware(t *testing.T) {
	t.Parallel()
	for _, f := range loadFixtures(t) {
		t.Run(f.File, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(filepath.Join(fixtureDir, f.File))
			require.NoError(t, err)
			want, wantOK := wantUsage(f)
			check := func(how string, obs *recorder, got []byte) {
				t.Helper()
				assert.True(t, bytes.Equal(body, got), "%s: the client got other bytes", how)
				ev, n := obs.lastReconcile()
				require.Equal(t, 1, n, "%s: exactly one reconcile", how)
				if wantOK {
					assert.Equal(t, llmrate.ReconcileUsage, ev.Kind, how)
					assert.Equal(t, want, ev.Reported, how)
					assert.Equal(t, want.InputTokens+want.OutputTokens, ev.Actual, how)
				} else {
					assert.Equal(t, llmrate.ReconcileEstimated, ev.Kind, "%s: %s", how, f.Note)
				}
			}
			for name, chunks := range splits(body, 42) {
				if name == "1-byte" && len(body) > 256<<10 {
					continue
				}
				obs := &recorder{}
				h := newHarness(t, fixtureProvider(f, body, chunks), llmrate.WithObserver(obs))
				w := h.send("sk-fx", 400)
				require.Equal(t, f.Status, w.Code)
				check(name, obs, w.Body.Bytes())
			}
			// A real server: http.response implements io.ReaderFrom.
			obs := &recorder{}
			l, err := llmrate.New(llmrate.WithObserver(obs))
			require.NoError(t, err)
			srv := httptest.NewServer(l.Middleware(fixtureProvider(f, body, nil)))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer sk-fx")
			req.Header.Set("Accept-Encoding", "gzip") // keep the client from inflating
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			got, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			check("io.Copy/ReadFrom", obs, got)
		})
	}
}

// TestCutStreams: a stream cut off (or complete) without final usage is
// charged its input (reported, else the estimate, 1000 here) plus the
// larger of the reported output and its generated text's bytes ÷ 4, the
// text of complete events only.
func TestCutStreams(t *testing.T) {
	t.Parallel()
	const anthropicStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":412,\"output_tokens\":1}}}\n\n"
	const delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n"
	const openaiChunk = "data: {\"choices\":[{\"delta\":{\"content\":\"hello world\"}}]}\n\n"
	text := int64(len("hello world"))
	cases := []struct {
		name     string
		body     string
		panicAt  bool
		wantKind llmrate.ReconcileKind
		want     int64
	}{
		{"anthropic cut mid-event", anthropicStart + delta + "event: message_delta\ndata: {\"type\":\"mess", false, llmrate.ReconcilePartial, 412 + 1},
		{"openai cut without usage", openaiChunk + openaiChunk + "data: {\"choi", false, llmrate.ReconcileEstimated, 1000 + 2*text/4},
		{"handler panics mid-stream", openaiChunk, true, llmrate.ReconcileEstimated, 1000 + text/4},
		{"complete stream without usage: estimate plus text", openaiChunk + "data: [DONE]\n\n", false, llmrate.ReconcileEstimated, 1000 + text/4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			obs := &recorder{}
			provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, c.body)
				if c.panicAt {
					panic(http.ErrAbortHandler)
				}
			})
			h := newHarness(t, provider, llmrate.WithObserver(obs))
			func() {
				defer func() {
					p := recover()
					assert.Equal(t, c.panicAt, p != nil, "the handler's panic reaches the caller unchanged")
					if c.panicAt {
						assert.Equal(t, http.ErrAbortHandler, p)
					}
				}()
				h.send("sk-cut", 4000)
			}()
			ev, n := obs.lastReconcile()
			require.Equal(t, 1, n)
			assert.Equal(t, c.wantKind, ev.Kind)
			assert.Equal(t, c.want, ev.Actual)
		})
	}
}

// TestClientDisconnectMidStream: a client that goes away mid-stream leaves a
// partial reconcile, not a refund.
func TestClientDisconnectMidStream(t *testing.T) {
	t.Parallel()
	obs := &recorder{}
	gone := make(chan struct{})
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	})
	l, err := llmrate.New(llmrate.WithObserver(obs))
	require.NoError(t, err)
	srv := httptest.NewServer(l.Middleware(provider))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(strings.Repeat("x", 4000)))
	req.Header.Set("Authorization", "Bearer sk-gone")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	buf := make([]byte, 10)
	_, _ = resp.Body.Read(buf)
	_ = resp.Body.Close() // the client leaves
	<-gone
	require.Eventually(t, func() bool { _, n := obs.lastReconcile(); return n == 1 }, 5e9, 1e6)
	ev, _ := obs.lastReconcile()
	assert.Equal(t, llmrate.ReconcilePartial, ev.Kind)
	assert.Equal(t, int64(51), ev.Actual)
	assert.True(t, ev.Cut)
}

// TestNoUsageCarriedOver: trackers are pooled, so a response with no body
// (the handler writes nothing, a HEAD, a 204) right after one that reported
// usage must reconcile on its own estimate, never on the previous report.
func TestNoUsageCarriedOver(t *testing.T) {
	obs := &recorder{}
	usage := usageHandler(30, 70)
	bodyless := map[string]http.Handler{
		"nothing written": http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		"HEAD":            usage,
		"204":             http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
	}
	for name, next := range bodyless {
		t.Run(name, func(t *testing.T) {
			l, err := llmrate.New(llmrate.WithObserver(obs))
			require.NoError(t, err)
			withUsage, without := l.Middleware(usage), l.Middleware(next)
			for range 20 { // sync.Pool may drop some trackers, not all of them
				r := httptest.NewRequest(http.MethodPost, "/", nil)
				r.Header.Set("Authorization", "Bearer sk-pool")
				r.ContentLength = 400
				withUsage.ServeHTTP(httptest.NewRecorder(), r)
				ev, _ := obs.lastReconcile()
				require.Equal(t, llmrate.ReconcileUsage, ev.Kind)
				require.Equal(t, int64(100), ev.Actual)

				r = httptest.NewRequest(http.MethodPost, "/", nil)
				if name == "HEAD" {
					r.Method = http.MethodHead
				}
				r.Header.Set("Authorization", "Bearer sk-pool")
				r.ContentLength = 40
				without.ServeHTTP(httptest.NewRecorder(), r)
				ev, _ = obs.lastReconcile()
				require.Equal(t, llmrate.ReconcileEstimated, ev.Kind, "no usage from the previous response")
				require.Equal(t, int64(10), ev.Actual)
			}
		})
	}
}

// TestGzipBodyCutLeavesNoGoroutine: a gzip body cut off by a handler panic
// halfway through still has its decoder's goroutine joined when the
// request ends (goleak; serial, so no other test's goroutines are about).
func TestGzipBodyCutLeavesNoGoroutine(t *testing.T) {
	body, err := os.ReadFile(filepath.Join(fixtureDir, "anthropic-messages-stream.sse.gz"))
	require.NoError(t, err)
	obs := &recorder{}
	provider := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(body[:len(body)/2])
		panic(http.ErrAbortHandler)
	})
	h := newHarness(t, provider, llmrate.WithObserver(obs))
	func() {
		defer func() { assert.Equal(t, http.ErrAbortHandler, recover()) }()
		h.send("sk-gz", 400)
	}()
	ev, n := obs.lastReconcile()
	require.Equal(t, 1, n)
	assert.True(t, ev.Cut)
	goleak.VerifyNone(t)
}
