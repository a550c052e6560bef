package llmrate

import (
	"reflect"
	"sync"
	"sync/atomic"
)

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

// evictNotifier is a store's set of eviction subscribers. Each
// subscription is an entry of its own, found by its identity, never by
// comparing observers, so that any observer can be unsubscribed; an
// observer whose value is comparable is kept once however often it is
// subscribed (counted, and dropped at its last stop). Subscribing and
// unsubscribing cost O(1) whatever the number of subscribers; reporting an
// eviction takes no lock (subs is a sync.Map, read by Range).
type evictNotifier struct {
	mu    sync.Mutex
	next  uint64                 // the next subscription's identity
	byObs map[Observer]*evictSub // comparable observers' subscriptions
	subs  sync.Map               // uint64 → *evictSub: whom notify calls
	n     atomic.Int64           // distinct subscribers
}

type evictSub struct {
	id   uint64
	o    Observer
	key  bool // in byObs: o's value is comparable
	refs int  // under mu: subscriptions not yet stopped
}

func (n *evictNotifier) add(o Observer) (stop func()) {
	if o == nil {
		return func() {}
	}
	// Value.Comparable looks into the value: a comparable struct type
	// holding an interface whose dynamic value is a func is not, and would
	// panic as a map key.
	key := reflect.ValueOf(o).Comparable()
	n.mu.Lock()
	defer n.mu.Unlock()
	var s *evictSub
	if key {
		s = n.byObs[o]
	}
	if s == nil {
		n.next++
		s = &evictSub{id: n.next, o: o, key: key}
		if key {
			if n.byObs == nil {
				n.byObs = make(map[Observer]*evictSub)
			}
			n.byObs[o] = s
		}
		n.subs.Store(s.id, s)
		n.n.Add(1)
	}
	s.refs++
	var once sync.Once
	return func() { once.Do(func() { n.remove(s) }) }
}

// remove ends one of s's subscriptions: s itself at its last.
func (n *evictNotifier) remove(s *evictSub) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.refs--; s.refs > 0 {
		return
	}
	n.subs.Delete(s.id)
	if s.key {
		delete(n.byObs, s.o)
	}
	n.n.Add(-1)
}

// notify tells every subscriber of count evictions. A subscriber whose
// stop returned before notify began is not called.
func (n *evictNotifier) notify(count int) {
	if n.n.Load() == 0 {
		return
	}
	n.subs.Range(func(_, v any) bool {
		o := v.(*evictSub).o
		for range count {
			o.Evicted()
		}
		return true
	})
}

// len returns the number of distinct subscribers.
func (n *evictNotifier) len() int { return int(n.n.Load()) }
