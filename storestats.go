package llmrate

import "runtime"

// StoreStats is implemented by stores that count what they do besides
// deciding: the faults of a shared store, its breaker, the decisions a
// local fallback made in its place (redisstore.Store). An observer that
// implements StoreStatsObserver (otelrate's) is handed the limiter's store
// by New when the store implements StoreStats, so that an outage shows in
// its metrics and not only in the store's own methods.
type StoreStats interface {
	// StoreStats returns the store's counts since it was made. It is safe
	// to call while the store is in use, and cheap (a few atomic loads).
	StoreStats() StoreCounters
}

// StoreCounters is what a store counts (StoreStats). Every field but
// BreakerOpen and ChargesPending only grows; a store leaves at zero what
// it does not do.
type StoreCounters struct {
	// Errors counts calls to the shared store that failed (a deadline
	// passing included, a caller's cancellation not).
	Errors int64
	// BreakerOpen is whether the store's breaker is open now: the shared
	// store is not called (but for a probe now and then), and admissions
	// go to the local fallback, or fail open.
	BreakerOpen bool
	// BreakerOpens counts the times the breaker opened.
	BreakerOpens int64
	// Fallbacks counts the admissions a local fallback decided because
	// the shared store did not answer (allowed or refused).
	Fallbacks int64
	// Hedges counts calls sent again on another connection because no
	// answer came in time; Resends, calls sent again because their reply
	// was lost.
	Hedges, Resends int64
	// ChargesPending is the fallback's admissions waiting to be charged to
	// the shared store once it answers; ChargesSent counts those charged
	// (or found decided there), ChargesLost those that never will be.
	ChargesPending, ChargesSent, ChargesLost int64
}

// StoreStatsObserver is implemented by observers that report a store's
// counters (otelrate.Observer). New calls ObserveStore with the limiter's
// store when the store implements StoreStats; the limiter's Close calls
// stop, as does the limiter becoming unreachable. An observer given to
// several limiters sharing one store is handed it once per limiter: it
// counts the store once.
type StoreStatsObserver interface {
	ObserveStore(s StoreStats) (stop func())
}

// observeStore subscribes o to what store tells observers: its lossy
// evictions (EvictionNotifier) and its counters (StoreStats, when o is a
// StoreStatsObserver). It returns nil when there is nothing to stop, else
// the one stop that ends both (idempotent).
func observeStore(store Store, o Observer) (stop func()) {
	if o == nil {
		return nil
	}
	var stops []func()
	if n, ok := store.(EvictionNotifier); ok {
		stops = append(stops, n.NotifyEvictions(o))
	}
	if so, ok := o.(StoreStatsObserver); ok {
		if ss, ok := store.(StoreStats); ok {
			stops = append(stops, so.ObserveStore(ss))
		}
	}
	switch len(stops) {
	case 0:
		return nil
	case 1:
		return stops[0]
	}
	return func() {
		for _, s := range stops {
			if s != nil {
				s()
			}
		}
	}
}

// unsubscribeWhenCollected makes stop run once l is unreachable: a store
// outliving many limiters (rebuilt on every config reload, say) does not
// keep their observers, closed or not.
func unsubscribeWhenCollected(l *Limiter, stop func()) {
	runtime.AddCleanup(l, func(stop func()) { stop() }, stop)
}
