package upstream_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture reads a usage fixture of the repository and its manifest's
// expected total.
func fixture(t *testing.T, name string) (body string, total int64) {
	t.Helper()
	dir := filepath.Join("..", "testdata", "usage")
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	mb, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var m struct {
		Fixtures []struct {
			File          string `json:"file"`
			ExpectedTotal *int64 `json:"expected_total"`
		} `json:"fixtures"`
	}
	require.NoError(t, json.Unmarshal(mb, &m))
	for _, f := range m.Fixtures {
		if f.File == name {
			require.NotNil(t, f.ExpectedTotal, name)
			return string(b), *f.ExpectedTotal
		}
	}
	t.Fatalf("%s not in the manifest", name)
	return "", 0
}

// A response read to its end charges the key the provider's reported usage
// exactly, whatever the provider's shape.
func TestChargesReportedUsage(t *testing.T) {
	for _, tc := range []struct{ file, contentType string }{
		{"openai-chat.json", "application/json"},
		{"anthropic-messages.json", "application/json"},
		{"openai-chat-stream-include-usage.sse", "text/event-stream"},
		{"anthropic-messages-stream.sse", "text/event-stream"},
		{"openai-responses-stream.sse", "text/event-stream"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			body, total := fixture(t, tc.file)
			r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
			r.p.on("sk-a", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = io.WriteString(w, body)
			})
			resp, got := r.post(t, chat("gpt-4o", 400))
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, body, got, "the body passes through unchanged")
			lv := r.levels("a")
			assert.Equal(t, int64(200-1), lv[llmrate.KeyRequests], "one request")
			assert.Equal(t, 200_000-total, lv[llmrate.KeyTokens], "charged the reported usage exactly")
			ev := r.rec.reconciled()
			require.Len(t, ev, 1, "reconciled exactly once")
			assert.Equal(t, llmrate.ReconcileUsage, ev[0].Kind)
			assert.Equal(t, int64(400/4), ev[0].Estimate)
			assert.Equal(t, total, ev[0].Actual)
			assert.False(t, ev[0].Cut)
		})
	}
}

// A stream closed once its terminal event was read (as the official SDKs
// do) is complete: it charges the final usage. The same stream without its
// terminal event, closed at the same point, is cut: partial.
func TestCloseAfterTerminalEventIsNotCut(t *testing.T) {
	for _, tc := range []struct {
		file, terminal string
		cutKind        llmrate.ReconcileKind // without its terminal event
	}{
		{"openai-chat-stream-include-usage.sse", "data: [DONE]\n\n", llmrate.ReconcilePartial},
		{"anthropic-messages-stream.sse", "event: message_stop\n", llmrate.ReconcilePartial},
		{"openai-responses-stream.sse", "event: response.completed\n", llmrate.ReconcileEstimated}, // its usage is in the terminal event
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			full, total := fixture(t, tc.file)
			i := strings.LastIndex(full, tc.terminal)
			require.GreaterOrEqual(t, i, 0)
			for _, variant := range []struct {
				name   string
				stream string
				kind   llmrate.ReconcileKind
				cut    bool
			}{
				{"whole", full, llmrate.ReconcileUsage, false},
				{"without terminal event", full[:i], tc.cutKind, true},
			} {
				r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
				r.p.on("sk-a", sse(variant.stream, true)) // held open: no EOF
				resp, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(chat("claude", 400)))
				require.NoError(t, err)
				got := make([]byte, len(variant.stream))
				_, err = io.ReadFull(resp.Body, got)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				ev := r.rec.reconciled()
				require.Len(t, ev, 1, variant.name)
				assert.Equal(t, variant.kind, ev[0].Kind, variant.name)
				assert.Equal(t, variant.cut, ev[0].Cut, variant.name)
				if !variant.cut {
					assert.Equal(t, total, ev[0].Actual, variant.name)
					assert.Equal(t, 200_000-total, r.levels("a")[llmrate.KeyTokens], variant.name)
				}
			}
		})
	}
}

// A stream without usage, cut by the client, charges the estimate plus the
// generated text of its complete events / 4.
func TestCutStreamChargesGeneratedText(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
	// Two complete events carrying 13 + 27 bytes of content, then half an
	// event whose text must not count.
	stream := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello, world!\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("z", 27) + "\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"never counted, the event is not whole"
	r.p.on("sk-a", sse(stream, true))
	body := chat("gpt-4o", 800)
	resp, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_, err = io.ReadFull(resp.Body, make([]byte, len(stream)))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	want := int64(800/4 + (13+27)/4)
	ev := r.rec.reconciled()
	require.Len(t, ev, 1)
	assert.Equal(t, llmrate.ReconcileEstimated, ev[0].Kind)
	assert.True(t, ev[0].Cut)
	assert.Equal(t, want, ev[0].Actual)
	assert.Equal(t, 200_000-want, r.levels("a")[llmrate.KeyTokens])
}

// A JSON body whose declared length was read whole is complete even when the
// caller closes it without reading to EOF (a json.Decoder stops at the
// document's end).
func TestCloseAfterDeclaredLengthIsComplete(t *testing.T) {
	t.Parallel()
	body, total := fixture(t, "openai-chat.json")
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
	r.p.on("sk-a", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
	})
	resp, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(chat("gpt-4o", 400)))
	require.NoError(t, err)
	_, err = io.ReadFull(resp.Body, make([]byte, len(body)))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	ev := r.rec.reconciled()
	require.Len(t, ev, 1)
	assert.Equal(t, llmrate.ReconcileUsage, ev[0].Kind)
	assert.Equal(t, total, ev[0].Actual)
}

// Read to EOF and then closed, a body reconciles once.
func TestReconcilesExactlyOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
	resp, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(chat("m", 400)))
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Len(t, r.rec.reconciled(), 1, "at EOF")
	_, _ = resp.Body.Read(make([]byte, 8))
	require.NoError(t, resp.Body.Close())
	require.NoError(t, resp.Body.Close())
	assert.Empty(t, r.rec.reconciled(), "not again at Close")
	assert.Equal(t, int64(200_000-15), r.levels("a")[llmrate.KeyTokens])
}
