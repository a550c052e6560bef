package llmrate_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/felixge/httpsnoop"
	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readFromRecorder is a ResponseRecorder that also implements io.ReaderFrom,
// as net/http's own ResponseWriter does, so the wrapper exposes ReadFrom.
type readFromRecorder struct{ *httptest.ResponseRecorder }

func (w readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	return io.Copy(w.ResponseRecorder, src)
}

func postWithKey(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	return r
}

// TestRetainedWriterNeverLeaks: a handler that keeps its ResponseWriter past
// its return (a contract breach) can never write into a later request's
// response, whichever request reuses the limiter's pooled state: every use
// of the stale writer fails, and both responses hold only their own bytes.
func TestRetainedWriterNeverLeaks(t *testing.T) {
	l, err := llmrate.New()
	require.NoError(t, err)
	var kept http.ResponseWriter
	first := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		kept = w
		_, _ = io.WriteString(w, "first")
	}))
	var errs []error
	second := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "second:")
		kept.WriteHeader(http.StatusTeapot)
		_, err := kept.Write([]byte("LEAKED-FROM-FIRST"))
		errs = append(errs, err)
		_, err = io.WriteString(kept, "LEAKED-FROM-FIRST")
		errs = append(errs, err)
		_, err = kept.(io.ReaderFrom).ReadFrom(strings.NewReader("LEAKED-FROM-FIRST"))
		errs = append(errs, err)
		_, _ = io.WriteString(w, "end")
	}))
	for i := range 20 { // sync.Pool may drop a tracker now and then, not every time
		w1 := readFromRecorder{httptest.NewRecorder()}
		first.ServeHTTP(w1, postWithKey("sk-first"))
		w2 := readFromRecorder{httptest.NewRecorder()}
		errs = errs[:0]
		second.ServeHTTP(w2, postWithKey("sk-second"))
		require.Equal(t, "second:end", w2.Body.String(), "round %d: the second response holds only its own bytes", i)
		require.Equal(t, http.StatusOK, w2.Code, "round %d: the stale WriteHeader changed nothing", i)
		require.Equal(t, "first", w1.Body.String(), "round %d: nothing reaches the first response after its handler returned", i)
		require.Len(t, errs, 3)
		for j, err := range errs {
			require.ErrorIs(t, err, llmrate.ErrWriterReleased, "round %d: stale write %d", i, j)
		}
	}
}

// TestRetainedWriterConcurrent: a goroutine that keeps writing to its
// request's ResponseWriter after the handler returned, while other requests
// run, never reaches them (run under -race: no data race either).
func TestRetainedWriterConcurrent(t *testing.T) {
	l, err := llmrate.New()
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	leaky := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "x")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := io.WriteString(w, "LEAK"); err != nil {
					if !errors.Is(err, llmrate.ErrWriterReleased) {
						t.Errorf("stale write: %v", err)
					}
					return
				}
			}
		}()
	}))
	clean := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "clean")
	}))
	for range 50 {
		leaky.ServeHTTP(&lockedRecorder{w: httptest.NewRecorder()}, postWithKey("sk-leaky"))
		w := httptest.NewRecorder()
		clean.ServeHTTP(w, postWithKey("sk-clean"))
		assert.Equal(t, "clean", w.Body.String())
	}
	close(stop)
	wg.Wait()
}

// lockedRecorder is a recorder that a handler's stray goroutine may write
// concurrently with the middleware's own writes without a data race in the
// recorder itself (the limiter's state is what is under test).
type lockedRecorder struct {
	mu sync.Mutex
	w  *httptest.ResponseRecorder
}

func (r *lockedRecorder) Header() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Header()
}

func (r *lockedRecorder) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.WriteHeader(code)
}

func (r *lockedRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Write(b)
}

// blockingWriter is a ResponseWriter whose Write, once armed, signals
// entered and blocks until release is closed.
type blockingWriter struct {
	h       http.Header
	armed   chan struct{} // closed: the next Write blocks
	entered chan struct{}
	release chan struct{}
}

func (w *blockingWriter) Header() http.Header { return w.h }
func (w *blockingWriter) WriteHeader(int)     {}
func (w *blockingWriter) Write(b []byte) (int, error) {
	select {
	case <-w.armed:
		close(w.entered)
		<-w.release
	default:
	}
	return len(b), nil
}

// TestWriteRunningWhenHandlerReturns: a write still running through the
// writer when its handler returns keeps the limiter off that request's
// state (no data race, nothing reused); the estimate stands, and the
// reconcile says the response was cut. The next write fails.
func TestWriteRunningWhenHandlerReturns(t *testing.T) {
	obs := &recorder{}
	l, err := llmrate.New(llmrate.WithObserver(obs))
	require.NoError(t, err)
	bw := &blockingWriter{h: http.Header{}, armed: make(chan struct{}), entered: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error)
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"usage":`)
		close(bw.armed)
		go func() {
			_, _ = io.WriteString(w, `{"prompt_tokens":1,"completion_tokens":1}}`) // blocks in bw
			_, err := io.WriteString(w, "more")
			done <- err
		}()
		<-bw.entered
	}))
	r := postWithKey("sk-busy")
	r.ContentLength = 400
	h.ServeHTTP(bw, r)
	ev, n := obs.lastReconcile()
	require.Equal(t, 1, n)
	assert.Equal(t, llmrate.ReconcileEvent{Kind: llmrate.ReconcileEstimated, Tier: llmrate.Free, Plan: "free", Estimate: 100, Actual: 100, Cut: true}, ev)
	close(bw.release)
	require.ErrorIs(t, <-done, llmrate.ErrWriterReleased)
	w := httptest.NewRecorder()
	l.Middleware(okHandler).ServeHTTP(w, postWithKey("sk-busy"))
	assert.Equal(t, http.StatusOK, w.Code)
}

// TestMiddlewareAllocs: on a ResponseWriter with Write and WriteHeader only
// (BenchmarkMiddleware's), llmrate allocates two small functions per
// request beyond the handler's own allocations and httpsnoop.Wrap's: the
// writer bound to the request (one per hooked method, so five on net/http's
// writer, which also has WriteString, ReadFrom and Hijack).
func TestMiddlewareAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops trackers at random; .ci/run runs this guard without -race")
	}
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	tt := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	l, err := llmrate.New(llmrate.WithTiers(tt))
	require.NoError(t, err)
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(oneKBResponse)
	})
	h := l.Middleware(next)
	r := postWithKey("sk-allocs")
	r.ContentLength = 400
	w := &reusableWriter{h: http.Header{}}
	h.ServeHTTP(w, r) // the key is known, a tracker pooled
	withLimiter := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) })
	bare := testing.AllocsPerRun(1000, func() { next.ServeHTTP(w, r) })
	hooks := httpsnoop.Hooks{
		WriteHeader: func(n httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc { return n },
		Write:       func(n httpsnoop.WriteFunc) httpsnoop.WriteFunc { return n },
	}
	wrap := testing.AllocsPerRun(1000, func() { _ = httpsnoop.Wrap(w, hooks) })
	assert.LessOrEqual(t, withLimiter-bare-wrap, 2.0, "llmrate's own allocations per request (middleware %v, bare handler %v, httpsnoop.Wrap %v)", withLimiter, bare, wrap)
}
