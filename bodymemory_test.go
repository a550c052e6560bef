package llmrate_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/require"
)

// heldPerStream starts streams requests with body through a limiter that
// reads bodies ahead (ModelFromBody and EstimateFromBody), each to a
// handler that calls consume on its body and then streams until released,
// and returns the heap they hold per stream while all are open, measured
// after a collection.
func heldPerStream(t *testing.T, body string, streams int, consume func(io.ReadCloser)) uint64 {
	t.Helper()
	big := llmrate.Limits{RequestsPerMinute: 100_000, TokensPerMinute: 1_000_000_000}
	ready, release := make(chan struct{}, streams), make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		consume(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
		w.(http.Flusher).Flush()
		ready <- struct{}{}
		<-release // a long stream
	}),
		llmrate.WithTiers(llmrate.TierTable{Free: big, Developer: big, Team: big, Growth: big, Scale: big, Enterprise: big}),
		llmrate.WithModel(llmrate.ModelFromBody()),
		llmrate.WithModelLimits(llmrate.ModelLimits{"m": {Free: big, Developer: big, Team: big, Growth: big, Scale: big, Enterprise: big}}),
		llmrate.WithEstimator(llmrate.EstimateFromBody()))

	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for range streams {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)) // shares body's bytes
		r.Header.Set("Authorization", "Bearer sk-mem")
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			h.h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Errorf("status %d: %s", w.Code, w.Body)
			}
		}()
	}
	for range streams {
		<-ready
	}
	runtime.GC()
	runtime.ReadMemStats(&during)
	close(release)
	wg.Wait()
	if during.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return (during.HeapAlloc - before.HeapAlloc) / uint64(streams)
}

// promptOf returns a chat request of about n bytes.
func promptOf(n int) string {
	return `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`
}

// TestReadAheadReleasedOnceConsumed: a long stream whose handler has read
// (or closed) its request body does not keep the body's read-ahead copy:
// 100 streams after prompts of about 1 MiB hold what a stream holds, not
// what a prompt weighs (before: about 1.16 MiB each, until the streams
// ended).
func TestReadAheadReleasedOnceConsumed(t *testing.T) {
	body := promptOf(1_000_000)
	for name, consume := range map[string]func(io.ReadCloser){
		"read":   func(b io.ReadCloser) { _, _ = io.Copy(io.Discard, b); _ = b.Close() },
		"closed": func(b io.ReadCloser) { _ = b.Close() },
		"read, not closed": func(b io.ReadCloser) {
			_, _ = io.Copy(io.Discard, b)
		},
	} {
		per := heldPerStream(t, body, 100, consume)
		t.Logf("%s: %d KiB per stream", name, per>>10)
		require.Less(t, per, uint64(64<<10), "%s: a stream holds %d KiB after its ~1 MiB body was consumed", name, per>>10)
	}
}

// TestReadAheadHeldToMaxModelBody: while the next handler has not read the
// body, what is held for it is at most MaxModelBody bytes (and a little
// for the request's own state), not a buffer grown past it.
func TestReadAheadHeldToMaxModelBody(t *testing.T) {
	body := promptOf(llmrate.MaxModelBody - 1000) // just under the bound: read ahead whole
	per := heldPerStream(t, body, 100, func(io.ReadCloser) {})
	t.Logf("%d KiB per stream", per>>10)
	require.Less(t, per, uint64(llmrate.MaxModelBody+32<<10), "a stream holds %d KiB for a body read ahead whole", per>>10)
}
