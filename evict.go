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
	// until stop is called (stop is idempotent). An observer subscribed more
	// than once (given to several limiters sharing the store) is called once
	// per eviction, when its dynamic type is comparable. It is safe to call
	// while the store is in use.
	NotifyEvictions(o Observer) (stop func())
}

var _ EvictionNotifier = (*MemoryStore)(nil)

// evictNotifier is a store's set of eviction subscribers: an immutable
// slice behind an atomic pointer, replaced under mu, so that reporting an
// eviction takes no lock.
type evictNotifier struct {
	mu   sync.Mutex
	subs atomic.Pointer[[]evictSub]
}

type evictSub struct {
	o    Observer
	refs int
}

func (n *evictNotifier) add(o Observer) (stop func()) {
	if o == nil {
		return func() {}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var old []evictSub
	if p := n.subs.Load(); p != nil {
		old = *p
	}
	subs := append([]evictSub(nil), old...)
	i := subIndex(subs, o)
	if i < 0 {
		subs = append(subs, evictSub{o: o})
		i = len(subs) - 1
	}
	subs[i].refs++
	n.subs.Store(&subs)
	var once sync.Once
	return func() { once.Do(func() { n.remove(o) }) }
}

func (n *evictNotifier) remove(o Observer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.subs.Load()
	if p == nil {
		return
	}
	subs := append([]evictSub(nil), *p...)
	i := subIndex(subs, o)
	if i < 0 {
		return
	}
	if subs[i].refs--; subs[i].refs == 0 {
		subs = append(subs[:i], subs[i+1:]...)
	}
	n.subs.Store(&subs)
}

// subIndex finds o among subs by identity: the same comparable observer
// value. An observer of an incomparable type is never merged with another.
func subIndex(subs []evictSub, o Observer) int {
	if !reflect.TypeOf(o).Comparable() {
		return -1
	}
	for i, s := range subs {
		if reflect.TypeOf(s.o) == reflect.TypeOf(o) && s.o == o {
			return i
		}
	}
	return -1
}

// notify tells every subscriber of n evictions.
func (n *evictNotifier) notify(count int) {
	p := n.subs.Load()
	if p == nil {
		return
	}
	for _, s := range *p {
		for range count {
			s.o.Evicted()
		}
	}
}

// len returns the number of distinct subscribers.
func (n *evictNotifier) len() int {
	if p := n.subs.Load(); p != nil {
		return len(*p)
	}
	return 0
}
