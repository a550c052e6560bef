package memstore

import (
	"testing"
	"time"
)

// TestSecondsToFull: the time until time alone refills a bucket, rounded up
// to the second, worked by hand; fullNever past 68 years or without a rate.
func TestSecondsToFull(t *testing.T) {
	for _, c := range []struct {
		b    Bucket
		rate int64
		want int64
	}{
		{Bucket{Level: 400_000}, 200_000, 0},                   // full
		{Bucket{Level: -80_000_000}, 200_000, 24_120},          // 80,400,000 owed at 200,000/min: 402 min
		{Bucket{Level: -80_000_000, Frac: 1}, 200_000, 24_120}, // a hair less owed: still 402 min, rounded up
		{Bucket{Level: 399_999}, 200_000, 1},                   // 0.3 ms, rounded up to a second
		{Bucket{Level: -4 * maxPerMinute}, 1, fullNever},       // 4e12 minutes
		{Bucket{Level: -1}, 0, fullNever},                      // no rate: never known to refill
		{Bucket{Level: -2 * 2 * 100}, 100, 6 * 60},             // the floor at its own figures: 6 minutes
	} {
		if got := secondsToFull(c.b, c.rate); got != c.want {
			t.Errorf("secondsToFull(%+v, %d) = %d, want %d", c.b, c.rate, got, c.want)
		}
	}
}

// TestMarkKeepsBothFields: the solo flag and the seconds until full share
// one word without disturbing each other.
func TestMarkKeepsBothFields(t *testing.T) {
	var m mark
	m.setFullIn(fullNever)
	m.setSolo(true)
	if !m.solo() || m.fullIn() != fullNever {
		t.Fatalf("solo %v, fullIn %d", m.solo(), m.fullIn())
	}
	m.setFullIn(120)
	if !m.solo() || m.fullIn() != 120 {
		t.Fatalf("solo %v, fullIn %d", m.solo(), m.fullIn())
	}
	m.setSolo(false)
	if m.solo() || m.fullIn() != 120 {
		t.Fatalf("solo %v, fullIn %d", m.solo(), m.fullIn())
	}
	e := Entry{Last: 10 * int64(time.Second), mark: m}
	if e.idleFull(129*int64(time.Second)) || !e.idleFull(130*int64(time.Second)) {
		t.Fatal("idleFull: full exactly 120 s after last")
	}
}
