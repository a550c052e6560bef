package llmrate

// EvictionNotifier is implemented by stores that may drop bucket state
// before time alone has refilled it (a lossy eviction): the MemoryStore at
// its WithMaxKeys bound, and stores that fall back on one (redisstore's
// WithFallbackLocal). New subscribes the limiter's observer (WithObserver)
// to its store's evictions, so every limiter sharing a store hears of each
// of them, whichever limiter's request caused it.
type EvictionNotifier interface {
	// NotifyEvictions calls o.Evicted once per lossy eviction from now on,
	// until stop is called (stop is idempotent), whatever o's type: a
	// subscription is ended by its stop, never found by comparing
	// observers, so an observer of a type that is not comparable (a func
	// type, a struct holding a map) is unsubscribed too. An observer
	// subscribed more than once (given to several limiters sharing the
	// store) is called once per eviction when its value is comparable,
	// until its last stop; one that is not is called once per
	// subscription. Subscribing costs the same however many observers are
	// subscribed. It is safe to call while the store is in use.
	NotifyEvictions(o Observer) (stop func())
}

var _ EvictionNotifier = (*MemoryStore)(nil)
