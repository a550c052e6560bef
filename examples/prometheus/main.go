// Command prometheus exposes llmrate's events as Prometheus metrics. It
// lives in its own module so Prometheus never enters llmrate's go.mod; the
// repository's go.work ties it in for development and CI.
//
// Metrics (no key, workspace or any other identity in a label):
//
//	llmrate_requests_total{decision="admitted|refused",bucket="…",tier="…"}
//	llmrate_reconciles_total{kind="usage|partial|estimated",tier="…"}
//	llmrate_reconcile_ratio        histogram of actual ÷ estimate
//	llmrate_retry_after_seconds    histogram of the Retry-After sent
//	llmrate_fail_open_total{op="admit|reconcile"}
//	llmrate_evictions_total
package main

import (
	"log"
	"net/http"

	"github.com/llmrate/llmrate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is an llmrate.Observer backed by Prometheus collectors.
type Metrics struct {
	requests   *prometheus.CounterVec
	reconciles *prometheus.CounterVec
	ratio      prometheus.Histogram
	retry      prometheus.Histogram
	failOpen   *prometheus.CounterVec
	evictions  prometheus.Counter
}

// NewMetrics registers the collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmrate_requests_total", Help: "Admission decisions, by decision, refusing bucket (none when admitted) and tier.",
		}, []string{"decision", "bucket", "tier"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmrate_reconciles_total", Help: "Reconciles after admitted responses, by what they were based on.",
		}, []string{"kind", "tier"}),
		ratio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llmrate_reconcile_ratio", Help: "Charged tokens divided by the admission estimate.",
			Buckets: []float64{0.01, 0.1, 0.25, 0.5, 1, 2, 4, 10, 100},
		}),
		retry: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llmrate_retry_after_seconds", Help: "Retry-After sent with refusals.",
			Buckets: []float64{1, 2, 5, 10, 20, 30, 60},
		}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmrate_fail_open_total", Help: "Requests let through or not reconciled because the limiter's state faulted.",
		}, []string{"op"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmrate_evictions_total", Help: "Buckets dropped before they were full, at the memory store's MaxKeys bound.",
		}),
	}
	reg.MustRegister(m.requests, m.reconciles, m.ratio, m.retry, m.failOpen, m.evictions)
	return m
}

// Decided implements llmrate.Observer.
func (m *Metrics) Decided(e llmrate.DecisionEvent) {
	if e.Allowed {
		m.requests.WithLabelValues("admitted", "none", e.Tier.String()).Inc()
		return
	}
	m.requests.WithLabelValues("refused", e.Refused.String(), e.Tier.String()).Inc()
	m.retry.Observe(e.RetryAfter.Seconds())
}

// Reconciled implements llmrate.Observer.
func (m *Metrics) Reconciled(e llmrate.ReconcileEvent) {
	m.reconciles.WithLabelValues(e.Kind.String(), e.Tier.String()).Inc()
	if e.Estimate > 0 {
		m.ratio.Observe(float64(e.Actual) / float64(e.Estimate))
	}
}

// FailedOpen implements llmrate.Observer.
func (m *Metrics) FailedOpen(e llmrate.FailOpenEvent) { m.failOpen.WithLabelValues(e.Op).Inc() }

// Evicted implements llmrate.Observer.
func (m *Metrics) Evicted() { m.evictions.Inc() }

func newMux(reg *prometheus.Registry) (*http.ServeMux, error) {
	lim, err := llmrate.New(llmrate.WithObserver(NewMetrics(reg)))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"usage":{"prompt_tokens":10,"completion_tokens":20}}`))
	})))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}

func main() {
	mux, err := newMux(prometheus.NewRegistry())
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
