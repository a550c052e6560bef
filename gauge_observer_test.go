package llmrate_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// panicOnce is an Observer whose Decided panics on its first call.
type panicOnce struct{ n atomic.Int64 }

func (p *panicOnce) Decided(llmrate.DecisionEvent) {
	if p.n.Add(1) == 1 {
		panic("observer bug")
	}
}
func (p *panicOnce) Reconciled(llmrate.ReconcileEvent) {}
func (p *panicOnce) FailedOpen(llmrate.FailOpenEvent)  {}
func (p *panicOnce) Evicted()                          {}

// TestGaugeSlotReleasedWhenDecidedPanics: the store admitted the
// request and took its gauge slot, then the Observer's Decided panicked;
// the limiter fails the request open (forwards it) but never reconciles it,
// so the slot is never released: with ConcurrentRequests 1 the key is
// refused forever after, though nothing is in flight.
func TestGaugeSlotReleasedWhenDecidedPanics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler, llmrate.WithTiers(capped(1000, 100_000, 1)), llmrate.WithObserver(&panicOnce{}))
	require.Equal(t, http.StatusOK, h.send("sk-a", 0).Code, "the faulted request fails open")
	assert.Equal(t, int64(1), h.lim.FailOpens())
	for i := range 3 {
		assert.Equal(t, http.StatusOK, h.send("sk-a", 0).Code, "request %d: nothing is in flight, the slot must be free", i)
	}
}
