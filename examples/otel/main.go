// Command otel exports llmrate's OpenTelemetry metrics (package otelrate)
// through the OpenTelemetry Prometheus exporter, on /metrics. It lives in
// its own module so that neither OpenTelemetry nor Prometheus enters
// llmrate's go.mod; the repository's go.work ties it in for development
// and CI. examples/prometheus does the same with Prometheus collectors of
// its own instead.
//
// The Prometheus names the exporter gives otelrate's instruments (dots
// become underscores, counters end in _total, a unit in seconds is
// appended):
//
//	llmrate_decisions_total{llmrate_result="allowed|waited|refused|shadow_refused",llmrate_bucket="…",llmrate_window_ms="…",llmrate_tier="…",llmrate_plan="…",llmrate_model="…"}
//	llmrate_wait_duration_seconds    histogram
//	llmrate_fail_opens_total{llmrate_operation="…",llmrate_plan="…"}
//	llmrate_reconciles_total{llmrate_reconcile_kind="usage|partial|estimated",llmrate_plan="…"}
//	llmrate_tokens_total{gen_ai_token_type="input|output",llmrate_plan="…"}
//	llmrate_estimate_ratio           histogram
//	llmrate_evictions_total
//
// and, for a store that counts its faults (redisstore's):
//
//	llmrate_store_errors_total, llmrate_store_breaker_open, llmrate_store_breaker_opens_total,
//	llmrate_store_fallbacks_total, llmrate_store_hedges_total, llmrate_store_resends_total,
//	llmrate_store_charges_pending, llmrate_store_charges_total{llmrate_charge_result="sent|lost"}
package main

import (
	"log"
	"net/http"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/otelrate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// newMux serves a mock provider limited by a Limiter built with opts on
// /v1/, and the metrics, read from the exporter registered with reg, on
// /metrics. The returned provider must be shut down when the program ends.
func newMux(reg *prometheus.Registry, opts ...llmrate.Option) (*http.ServeMux, *sdkmetric.MeterProvider, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obs, err := otelrate.New(otelrate.WithMeterProvider(provider))
	if err != nil {
		return nil, nil, err
	}
	lim, err := llmrate.New(append([]llmrate.Option{llmrate.WithObserver(obs)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"usage":{"prompt_tokens":10,"completion_tokens":20}}`))
	})))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, provider, nil
}

func main() {
	mux, _, err := newMux(prometheus.NewRegistry())
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
