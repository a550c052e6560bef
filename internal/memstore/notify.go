package memstore

import (
	"reflect"
	"sync"
	"sync/atomic"
)

// Evictee is what a subscriber to lossy evictions implements: the root's
// Observer does.
type Evictee interface{ Evicted() }

// Notifier is a store's set of eviction subscribers. Each
// subscription is an entry of its own, found by its identity, never by
// comparing observers, so that any observer can be unsubscribed; an
// observer whose value is comparable is kept once however often it is
// subscribed (counted, and dropped at its last stop). Subscribing and
// unsubscribing cost O(1) whatever the number of subscribers; reporting an
// eviction takes no lock (subs is a sync.Map, read by Range).
type Notifier struct {
	mu    sync.Mutex
	next  uint64           // the next subscription's identity
	byObs map[Evictee]*sub // comparable observers' subscriptions
	subs  sync.Map         // uint64 → *sub: whom Notify calls
	n     atomic.Int64     // distinct subscribers
}

type sub struct {
	id   uint64
	o    Evictee
	key  bool // in byObs: o's value is comparable
	refs int  // under mu: subscriptions not yet stopped
}

func (n *Notifier) Add(o Evictee) (stop func()) {
	if o == nil {
		return func() {}
	}
	// Value.Comparable looks into the value: a comparable struct type
	// holding an interface whose dynamic value is a func is not, and would
	// panic as a map key.
	key := reflect.ValueOf(o).Comparable()
	n.mu.Lock()
	defer n.mu.Unlock()
	var s *sub
	if key {
		s = n.byObs[o]
	}
	if s == nil {
		n.next++
		s = &sub{id: n.next, o: o, key: key}
		if key {
			if n.byObs == nil {
				n.byObs = make(map[Evictee]*sub)
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
func (n *Notifier) remove(s *sub) {
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

// Notify tells every subscriber of count evictions. A subscriber whose
// stop returned before Notify began is not called.
func (n *Notifier) Notify(count int) {
	if n.n.Load() == 0 {
		return
	}
	n.subs.Range(func(_, v any) bool {
		o := v.(*sub).o
		for range count {
			o.Evicted()
		}
		return true
	})
}

// Len returns the number of distinct subscribers.
func (n *Notifier) Len() int { return int(n.n.Load()) }
