package idrecord

import (
	"strconv"
	"testing"
	"time"
)

// TestExpiryPopsOnlyExpired: over a minute of Puts at a steady rate, the
// record holds the last life's identities (and at most a step's worth
// more), each Put examines at most expireStep+1 slots, and each identity
// is examined once.
func TestExpiryPopsOnlyExpired(t *testing.T) {
	const life, perSec = 30 * time.Second, 5_000
	r := New[string, bool](life, 1<<20)
	step := int64(time.Second / perSec)
	for i := range 60 * perSec {
		now := int64(i) * step
		before := r.Touched()
		if !r.Put(strconv.Itoa(i), true, now) {
			t.Fatalf("Put %d refused", i)
		}
		if d := r.Touched() - before; d > expireStep+1 {
			t.Fatalf("Put %d examined %d slots", i, d)
		}
		live := min(i+1, 30*perSec) // put less than a life before now
		if r.Len() < live || r.Len() > live+expireStep {
			t.Fatalf("after Put %d: %d held, want %d", i, r.Len(), live)
		}
	}
	if got, want := r.Touched(), int64(30*perSec); got > want+expireStep {
		t.Errorf("examined %d slots for %d expired identities", got, want)
	}
	if _, ok := r.Get("0", 60*int64(time.Second)); ok {
		t.Error("an identity a minute old is still held")
	}
	if _, ok := r.Get(strconv.Itoa(60*perSec-1), 60*int64(time.Second)); !ok {
		t.Error("the last identity is not held")
	}
}

// TestGetHonoursLife: an identity is held for exactly its life.
func TestGetHonoursLife(t *testing.T) {
	r := New[string, int](time.Second, 8)
	r.Put("a", 7, 0)
	if v, ok := r.Get("a", int64(time.Second)-1); !ok || v != 7 {
		t.Errorf("Get just before the end of its life = %d, %v", v, ok)
	}
	if _, ok := r.Get("a", int64(time.Second)); ok {
		t.Error("Get at the end of its life still finds it")
	}
}

// TestRenewedIdentityKept: an identity put again lives a life from its
// second Put, though its first slot comes to the ring's head before.
func TestRenewedIdentityKept(t *testing.T) {
	sec := int64(time.Second)
	r := New[string, int](10*time.Second, 100)
	r.Put("a", 1, 0)
	r.Put("a", 2, 5*sec)
	for i := range 20 {
		r.Put("x"+strconv.Itoa(i), 0, 11*sec) // pops a's first slot
	}
	if v, ok := r.Get("a", 14*sec); !ok || v != 2 {
		t.Errorf("renewed identity at 14 s = %d, %v; want 2, true", v, ok)
	}
	if r.Len() != 21 {
		t.Errorf("Len = %d, want 21 (each identity one slot)", r.Len())
	}
	r.Put("y", 0, 16*sec)
	for range 10 {
		r.Put("y", 0, 22*sec)
	}
	if _, ok := r.Get("a", 16*sec); ok {
		t.Error("renewed identity still held past its renewed life")
	}
}

// TestBound: a full record refuses a new identity, renews one it holds,
// makes room by expiry when it can, and DropOldest forgets the oldest.
func TestBound(t *testing.T) {
	sec := int64(time.Second)
	r := New[string, int](10*time.Second, 3)
	for i := range 3 {
		if !r.Put(strconv.Itoa(i), i, int64(i)*sec) {
			t.Fatalf("Put %d refused", i)
		}
	}
	if r.Put("new", 0, 3*sec) {
		t.Error("a full record took a new identity")
	}
	if !r.Put("1", 9, 3*sec) {
		t.Error("a full record refused to renew one it holds")
	}
	if !r.DropOldest() {
		t.Fatal("DropOldest on a full record")
	}
	if _, ok := r.Get("0", 3*sec); ok {
		t.Error("DropOldest kept the oldest")
	}
	if !r.Put("new", 0, 3*sec) {
		t.Error("Put refused after DropOldest")
	}
	// At 12 s "1" (renewed at 3 s) lives, "2" (put at 2 s) has expired.
	if !r.Put("later", 0, 12*sec) {
		t.Error("Put refused though an identity had expired")
	}
	if _, ok := r.Get("1", 12*sec); !ok {
		t.Error("the renewed identity was dropped for room")
	}
	if r.Len() > 3 {
		t.Errorf("Len = %d past the bound 3", r.Len())
	}
}

// TestMemoryGivenBack: emptied after a burst, the record lets its ring
// and map go.
func TestMemoryGivenBack(t *testing.T) {
	r := New[string, bool](time.Second, 1<<20)
	for i := range 10_000 {
		r.Put(strconv.Itoa(i), true, 0)
	}
	puts := 0
	for r.Len() > 1 && puts < 10_000 {
		r.Put("z", true, int64(2*time.Second)) // pops up to expireStep each
		puts++
	}
	if want := 10_000/expireStep + 1; puts > want {
		t.Errorf("%d Puts to pop 10,000 expired identities, want at most %d", puts, want)
	}
	r.Put("z", true, int64(10*time.Second))
	if r.Len() != 1 || len(r.q) > 1024 {
		t.Errorf("after everything expired: %d held, ring of %d slots", r.Len(), len(r.q))
	}
}
