package otelrate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap/zaptest"
)

// fakeStats is a store's counters, set by the test.
type fakeStats struct {
	mu sync.Mutex
	c  llmrate.StoreCounters
}

func (f *fakeStats) StoreStats() llmrate.StoreCounters {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.c
}

func (f *fakeStats) set(c llmrate.StoreCounters) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c = c
}

// gauges returns an Int64 gauge's or non-monotonic sum's value per
// attribute set.
func gauges(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	switch d := find(t, rm, name).Data.(type) {
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			out[label(dp.Attributes)] = dp.Value
		}
	case metricdata.Sum[int64]:
		assert.False(t, d.IsMonotonic, "%s is an up-down counter", name)
		for _, dp := range d.DataPoints {
			out[label(dp.Attributes)] = dp.Value
		}
	default:
		require.FailNow(t, name+" is no int64 gauge or sum")
	}
	return out
}

// storeValues reads every store instrument, "" keyed.
func storeValues(t *testing.T, rm metricdata.ResourceMetrics) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, name := range []string{"llmrate.store.errors", "llmrate.store.breaker.opens", "llmrate.store.fallbacks", "llmrate.store.hedges", "llmrate.store.resends"} {
		out[name] = counts(t, rm, name)[""]
	}
	out["llmrate.store.breaker.open"] = gauges(t, rm, "llmrate.store.breaker.open")[""]
	out["llmrate.store.charges.pending"] = gauges(t, rm, "llmrate.store.charges.pending")[""]
	ch := counts(t, rm, "llmrate.store.charges")
	out["llmrate.store.charges sent"] = ch["llmrate.charge.result=sent"]
	out["llmrate.store.charges lost"] = ch["llmrate.charge.result=lost"]
	return out
}

// TestStoreInstruments: the counters of the stores handed to ObserveStore,
// summed over distinct stores (one handed over twice counted once), read
// at each collection; none once every subscription is stopped, and no
// series at all before any store.
func TestStoreInstruments(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	rm := collect(t, reader)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			assert.False(t, strings.HasPrefix(m.Name, "llmrate.store."), "%s without a store", m.Name)
		}
	}

	a, b := &fakeStats{}, &fakeStats{}
	a.set(llmrate.StoreCounters{Errors: 5, BreakerOpen: true, BreakerOpens: 2, Fallbacks: 40, Hedges: 3, Resends: 1, ChargesPending: 30, ChargesSent: 9, ChargesLost: 1})
	b.set(llmrate.StoreCounters{Errors: 1, Hedges: 10, ChargesSent: 4})
	stopA1 := obs.ObserveStore(a)
	stopA2 := obs.ObserveStore(a) // a second limiter on the same store
	stopB := obs.ObserveStore(b)
	assert.Equal(t, map[string]int64{
		"llmrate.store.errors": 6, "llmrate.store.breaker.open": 1, "llmrate.store.breaker.opens": 2,
		"llmrate.store.fallbacks": 40, "llmrate.store.hedges": 13, "llmrate.store.resends": 1,
		"llmrate.store.charges.pending": 30, "llmrate.store.charges sent": 13, "llmrate.store.charges lost": 1,
	}, storeValues(t, collect(t, reader)))

	a.set(llmrate.StoreCounters{Errors: 5, BreakerOpens: 2, Fallbacks: 40, Hedges: 3, Resends: 1, ChargesSent: 39, ChargesLost: 1})
	stopB()
	stopB() // idempotent
	stopA1()
	assert.Equal(t, map[string]int64{
		"llmrate.store.errors": 5, "llmrate.store.breaker.open": 0, "llmrate.store.breaker.opens": 2,
		"llmrate.store.fallbacks": 40, "llmrate.store.hedges": 3, "llmrate.store.resends": 1,
		"llmrate.store.charges.pending": 0, "llmrate.store.charges sent": 39, "llmrate.store.charges lost": 1,
	}, storeValues(t, collect(t, reader)), "a's second subscription stands")
	stopA2()
	rm = collect(t, reader)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if strings.HasPrefix(m.Name, "llmrate.store.") {
				assert.Zero(t, points(m), "%s once no store is observed", m.Name)
			}
		}
	}
}

// TestRedisOutageMovesInstruments: a limiter on redisstore with a local
// fallback, given the Observer: Redis stopped mid-run opens the breaker
// (llmrate.store.breaker.open 1), the fallback decides (fallbacks, and
// charges pending), calls fail (errors); started again, the breaker
// closes and the fallback's admissions are charged to Redis. Close takes
// the store back.
func TestRedisOutageMovesInstruments(t *testing.T) {
	srv, c := redisrig.Start(t)
	obs, reader := newObserver(t)
	s := redisrig.Store(t, c, redisstore.WithTimeout(500*time.Millisecond), redisstore.WithFallbackLocal(),
		redisstore.WithRetryInterval(20*time.Millisecond), redisstore.WithLogger(zaptest.NewLogger(t)))
	lim, err := llmrate.New(llmrate.WithStore(s), llmrate.WithObserver(obs), llmrate.WithStoreTimeout(2*time.Second))
	require.NoError(t, err)
	h := lim.Middleware(usageReply(1, 1))
	n := 0
	send := func() {
		t.Helper()
		n++
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
		r.Header.Set("Authorization", "Bearer sk-outage-"+strconv.Itoa(n%7))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code)
	}
	for range 5 {
		send()
	}
	v0 := storeValues(t, collect(t, reader))
	assert.Zero(t, v0["llmrate.store.breaker.open"], "Redis up: the breaker is closed")
	assert.Zero(t, v0["llmrate.store.breaker.opens"])

	srv.Stop()
	require.Eventually(t, func() bool { send(); return s.StoreStats().BreakerOpen }, 10*time.Second, time.Millisecond)
	for range 20 {
		send()
	}
	v := storeValues(t, collect(t, reader))
	assert.Equal(t, int64(1), v["llmrate.store.breaker.open"], "Redis down: the breaker is open")
	assert.Equal(t, int64(1), v["llmrate.store.breaker.opens"])
	assert.GreaterOrEqual(t, v["llmrate.store.errors"]-v0["llmrate.store.errors"], int64(3))
	assert.GreaterOrEqual(t, v["llmrate.store.fallbacks"]-v0["llmrate.store.fallbacks"], int64(20))
	assert.GreaterOrEqual(t, v["llmrate.store.charges.pending"], int64(20), "each fallback admission awaits its charge")
	assert.LessOrEqual(t, v["llmrate.store.charges.pending"], v["llmrate.store.fallbacks"])
	assert.Zero(t, lim.FailOpens(), "the fallback answered")

	srv.Restart(t)
	require.Eventually(t, func() bool {
		send()
		st := s.StoreStats()
		return !st.BreakerOpen && st.ChargesSent+st.ChargesLost == st.Fallbacks
	}, 10*time.Second, time.Millisecond, "Redis answers again, the charges settled")
	v = storeValues(t, collect(t, reader))
	assert.Zero(t, v["llmrate.store.breaker.open"])
	assert.Equal(t, int64(1), v["llmrate.store.breaker.opens"])
	assert.Zero(t, v["llmrate.store.charges.pending"])
	assert.Equal(t, v["llmrate.store.fallbacks"], v["llmrate.store.charges sent"], "every fallback admission charged")
	assert.Zero(t, v["llmrate.store.charges lost"])

	require.NoError(t, lim.Close(context.Background()))
	for _, sm := range collect(t, reader).ScopeMetrics {
		for _, m := range sm.Metrics {
			if strings.HasPrefix(m.Name, "llmrate.store.") {
				assert.Zero(t, points(m), "%s once the limiter is closed", m.Name)
			}
		}
	}
}

// points returns how many data points m has.
func points(m metricdata.Metrics) int {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	}
	return -1
}
