package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// series returns, per family name, each series' labels (the exporter's
// otel_scope_* labels left out, the rest as sorted "k=v" joined by ",")
// and its value: a counter's value, or a histogram's "count sum".
func series(t *testing.T, reg *prometheus.Registry) map[string]map[string][2]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]map[string][2]float64{}
	for _, f := range families {
		m := map[string][2]float64{}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				if !strings.HasPrefix(l.GetName(), "otel_scope_") {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			sort.Strings(labels)
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				m[strings.Join(labels, ",")] = [2]float64{s.GetCounter().GetValue()}
			case dto.MetricType_HISTOGRAM:
				h := s.GetHistogram()
				m[strings.Join(labels, ",")] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
			}
		}
		out[f.GetName()] = m
	}
	return out
}

// TestPrometheusExport: a limiter's decisions, reconciles and tokens reach
// Prometheus through the OpenTelemetry exporter with exact values, and no
// key in any label of the scrape.
func TestPrometheusExport(t *testing.T) {
	reg := prometheus.NewRegistry()
	// A clock that stands still: no bucket refills while the test runs.
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mux, provider, err := newMux(reg, llmrate.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	const key = "sk-otel-SECRET"
	// The Free tier's 100 requests a minute admit a burst of 200.
	for range 205 {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(strings.Repeat("x", 40)))
		r.Header.Set("Authorization", "Bearer "+key)
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	got := series(t, reg)
	assert.Equal(t, map[string][2]float64{
		"llmrate_model=,llmrate_plan=free,llmrate_result=allowed,llmrate_tier=free":                                                     {200},
		"llmrate_bucket=key_requests,llmrate_model=,llmrate_plan=free,llmrate_result=refused,llmrate_tier=free,llmrate_window_ms=60000": {5},
	}, got["llmrate_decisions_total"])
	assert.Equal(t, map[string][2]float64{"llmrate_plan=free,llmrate_reconcile_kind=usage": {200}}, got["llmrate_reconciles_total"])
	// Each admitted request: a 40-byte body (estimate 10), charged 10 + 20.
	assert.Equal(t, map[string][2]float64{"gen_ai_token_type=input,llmrate_plan=free": {2000}, "gen_ai_token_type=output,llmrate_plan=free": {4000}}, got["llmrate_tokens_total"])
	assert.Equal(t, map[string][2]float64{"": {200, 600}}, got["llmrate_estimate_ratio"])

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	text := string(body)
	assert.Contains(t, text, "# TYPE llmrate_decisions_total counter")
	assert.NotContains(t, text, "SECRET", "no raw key in any label")
	assert.NotContains(t, text, "sk-otel")
}

// countingStore is a store that counts its faults (llmrate.StoreStats).
type countingStore struct{ llmrate.Store }

func (countingStore) StoreStats() llmrate.StoreCounters {
	return llmrate.StoreCounters{Errors: 4, BreakerOpen: true, BreakerOpens: 1, Fallbacks: 9, ChargesPending: 9, ChargesLost: 2}
}

// TestStoreMetricsExported: the names the exporter gives the store
// instruments, as the package doc lists them.
func TestStoreMetricsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, provider, err := newMux(reg, llmrate.WithStore(countingStore{llmrate.NewMemoryStore()}))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if !strings.HasPrefix(f.GetName(), "llmrate_store_") {
				continue
			}
			name := f.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "llmrate_charge_result" {
					name += "{" + l.GetValue() + "}"
				}
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{
		"llmrate_store_errors_total": 4, "llmrate_store_breaker_open": 1, "llmrate_store_breaker_opens_total": 1,
		"llmrate_store_fallbacks_total": 9, "llmrate_store_hedges_total": 0, "llmrate_store_resends_total": 0,
		"llmrate_store_charges_pending": 9, "llmrate_store_charges_total{sent}": 0, "llmrate_store_charges_total{lost}": 2,
	}, got)
}
