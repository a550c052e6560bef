package redisstore

import (
	"testing"
	"time"
)

// TestSeenRecordFullStopsAbsorbing: once a reconcile finds the record
// full, no reconcile is absorbed for a record's life after it (a repeat
// of the one not recorded must not be absorbed), and absorbing resumes
// once that life is over.
func TestSeenRecordFullStopsAbsorbing(t *testing.T) {
	sr := &seenRecord{limit: 2}
	t0 := time.Unix(1_000, 0)
	for _, id := range []string{"a", "b"} {
		if got := sr.absorb(id, t0); got != absorbOK {
			t.Fatalf("absorb(%q) = %d on a record with room", id, got)
		}
	}
	if got := sr.absorb("c", t0); got != absorbRefused {
		t.Fatalf("absorb(c) on a full record = %d", got)
	}
	sr.sent("c", t0) // to Redis: not recorded either
	if seen, _, open := sr.lookup("c", t0.Add(29*time.Second)); seen || open {
		t.Errorf("lookup(c) 29 s later: seen %v, open %v; want a lease kept from absorbing it", seen, open)
	}
	if got := sr.absorb("d", t0.Add(29*time.Second)); got != absorbRefused {
		t.Errorf("absorb(d) 29 s after the overflow = %d, want refused", got)
	}
	if _, absorbed, _ := sr.lookup("a", t0.Add(29*time.Second)); !absorbed {
		t.Error("an absorbed identity was forgotten within its life")
	}
	later := t0.Add(59*time.Second + time.Millisecond) // past the last refusal's life (at 29 s)
	if _, _, open := sr.lookup("e", later); !open {
		t.Error("still closed a life after the last refusal")
	}
	if got := sr.absorb("e", later); got != absorbOK {
		t.Errorf("absorb(e) once a and b expired = %d", got)
	}
	if got := sr.absorb("e", later); got != absorbDone {
		t.Errorf("absorb(e) again = %d, want already absorbed", got)
	}
}
