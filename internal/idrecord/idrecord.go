// Package idrecord keeps identities (admission and reconcile IDs) for a
// fixed life, with a bound on how many it holds and on the work each costs.
//
// A Record is a map beside a ring of the identities in the order they were
// put. Expiry pops from the ring's head only identities whose life is over,
// a few per Put: each identity is put once, popped once (twice if it was
// put again while held), so the work per Put is O(1) amortized and bounded
// per call, whatever the rate, and the record holds the identities of the
// last life and no more (apart from at most a few Puts' worth not yet
// popped). A Record holds at most its Max identities: past that, Put
// refuses, and the caller chooses what to give up (DropOldest, or not
// recording). A Record is not safe for concurrent use.
package idrecord

import "time"

// expireStep is how many expired identities a Put pops at most, beyond
// the one it needs for room when the record is full: more than the one it
// adds, so a backlog (after a pause in Puts) drains as Puts resume.
const expireStep = 4

// Record holds identities (of type K: the ID itself, or a wide enough hash
// of it) with a value each, for a fixed life.
type Record[K comparable, V any] struct {
	life int64 // in the callers' time unit (ns)
	max  int
	m    map[K]item[V]
	// The ring: every identity in m has exactly one slot, so n == len(m).
	q       []slot[K]
	head, n int
	touched int64 // ring slots expiry examined
}

type item[V any] struct {
	v   V
	exp int64
}

type slot[K comparable] struct {
	id  K
	exp int64 // the item's exp when the slot was pushed
}

// New returns a Record keeping each identity life after its Put, holding
// at most limit (at least 1).
func New[K comparable, V any](life time.Duration, limit int) *Record[K, V] {
	return &Record[K, V]{life: int64(life), max: max(1, limit), m: map[K]item[V]{}}
}

// Max returns the most identities r holds.
func (r *Record[K, V]) Max() int { return r.max }

// Len returns how many identities r holds, expired ones not yet popped
// included.
func (r *Record[K, V]) Len() int { return r.n }

// Touched returns how many ring slots expiry has examined in all.
func (r *Record[K, V]) Touched() int64 { return r.touched }

// Get returns id's value when it was put less than a life before now.
func (r *Record[K, V]) Get(id K, now int64) (V, bool) {
	it, ok := r.m[id]
	if !ok || now >= it.exp {
		var zero V
		return zero, false
	}
	return it.v, true
}

// Put records id with v for a life from now (an identity held already is
// renewed), after popping expired identities from the ring's head. It
// reports false, recording nothing, when r holds Max identities that are
// not expired and id is not among them.
func (r *Record[K, V]) Put(id K, v V, now int64) bool {
	r.expire(now)
	it, held := r.m[id]
	if !held && r.n >= r.max {
		return false
	}
	it.v, it.exp = v, now+r.life
	r.m[id] = it
	if !held {
		r.push(slot[K]{id: id, exp: it.exp})
	}
	return true
}

// DropOldest forgets the identity first in the ring (the one put longest
// ago, nearest the end of its life) and reports whether there was one.
func (r *Record[K, V]) DropOldest() bool {
	if r.n == 0 {
		return false
	}
	delete(r.m, r.pop().id)
	return true
}

// expire pops up to expireStep expired identities from the ring's head,
// and as many more as it takes to leave room when r is full. An identity
// renewed since its slot was pushed goes to the ring's tail instead: it is
// popped once its renewed life is over (a slot behind a later one waits
// for it: never popped early, only late).
func (r *Record[K, V]) expire(now int64) {
	for i := 0; r.n > 0; i++ {
		s := r.q[r.head]
		if now < s.exp || i >= expireStep && r.n < r.max {
			break
		}
		r.touched++
		r.pop()
		if it := r.m[s.id]; now < it.exp {
			r.push(slot[K]{id: s.id, exp: it.exp})
			continue
		}
		delete(r.m, s.id)
	}
	if r.n == 0 && len(r.q) > 1024 {
		// Empty after a burst: give its memory back (a map never shrinks).
		r.q, r.head, r.m = nil, 0, map[K]item[V]{}
	}
}

func (r *Record[K, V]) pop() slot[K] {
	s := r.q[r.head]
	r.q[r.head] = slot[K]{}
	r.head = (r.head + 1) % len(r.q)
	r.n--
	return s
}

func (r *Record[K, V]) push(s slot[K]) {
	if r.n == len(r.q) {
		q := make([]slot[K], min(max(16, 2*len(r.q)), max(r.max, r.n+1)))
		for i := range r.n {
			q[i] = r.q[(r.head+i)%len(r.q)]
		}
		r.q, r.head = q, 0
	}
	r.q[(r.head+r.n)%len(r.q)] = s
	r.n++
}
