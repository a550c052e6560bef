package otelrate_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/otelrate"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A limiter's decisions, counted in OpenTelemetry metrics. A program gives
// otelrate the MeterProvider its exporter reads (or sets the global one).
func ExampleNew() {
	reader := sdkmetric.NewManualReader() // a Prometheus or OTLP exporter in a program
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()

	obs, err := otelrate.New(otelrate.WithMeterProvider(provider))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := llmrate.New(llmrate.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer sk-example")
	h.ServeHTTP(httptest.NewRecorder(), r)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "llmrate.decisions" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				result, _ := dp.Attributes.Value("llmrate.result")
				fmt.Println(m.Name, result.AsString(), dp.Value)
			}
		}
	}
	// Output: llmrate.decisions allowed 1
}
