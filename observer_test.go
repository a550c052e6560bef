package llmrate_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/llmrate/llmrate"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu         sync.Mutex
	decisions  []llmrate.DecisionEvent
	reconciles []llmrate.ReconcileEvent
	failOpens  []llmrate.FailOpenEvent
	evictions  int
}

func (r *recorder) Decided(e llmrate.DecisionEvent) {
	r.mu.Lock()
	r.decisions = append(r.decisions, e)
	r.mu.Unlock()
}

func (r *recorder) Reconciled(e llmrate.ReconcileEvent) {
	r.mu.Lock()
	r.reconciles = append(r.reconciles, e)
	r.mu.Unlock()
}

func (r *recorder) FailedOpen(e llmrate.FailOpenEvent) {
	r.mu.Lock()
	r.failOpens = append(r.failOpens, e)
	r.mu.Unlock()
}

func (r *recorder) Evicted() {
	r.mu.Lock()
	r.evictions++
	r.mu.Unlock()
}

func (r *recorder) lastReconcile() (llmrate.ReconcileEvent, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reconciles) == 0 {
		return llmrate.ReconcileEvent{}, 0
	}
	return r.reconciles[len(r.reconciles)-1], len(r.reconciles)
}

func BenchmarkObserver(b *testing.B) {
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	tt := llmrate.TierTable{Free: huge, Developer: huge, Team: huge, Growth: huge, Scale: huge, Enterprise: huge}
	for _, c := range []struct {
		name string
		o    llmrate.Observer
	}{{"off", nil}, {"counting", &countingObserver{}}} {
		b.Run(c.name, func(b *testing.B) {
			opts := []llmrate.Option{llmrate.WithTiers(tt)}
			if c.o != nil {
				opts = append(opts, llmrate.WithObserver(c.o))
			}
			l, _ := llmrate.New(opts...)
			h := l.Middleware(okHandler)
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.Header.Set("Authorization", "Bearer sk-obs")
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for range b.N {
				h.ServeHTTP(w, r)
			}
		})
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// countingObserver is what a metrics observer does: atomic counters.
type countingObserver struct {
	admitted, refused, reconciled, failOpen, evicted counter
}

type counter struct{ n int64 }

func (c *counter) inc() { atomicAdd(&c.n) }

func (o *countingObserver) Decided(e llmrate.DecisionEvent) {
	if e.Allowed {
		o.admitted.inc()
	} else {
		o.refused.inc()
	}
}
func (o *countingObserver) Reconciled(llmrate.ReconcileEvent) { o.reconciled.inc() }
func (o *countingObserver) FailedOpen(llmrate.FailOpenEvent)  { o.failOpen.inc() }
func (o *countingObserver) Evicted()                          { o.evicted.inc() }
