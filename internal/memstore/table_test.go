package memstore

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestEntryTableMatchesMap drives the table and a Go map with the same
// random inserts, lookups, deletes and sweeps, with hashes chosen to crowd
// the index (shared home slots, shared tags, runs that wrap around the end,
// the hash 0), and checks after every step that both hold the same entries
// and that every Entry is found where it should be.
func TestEntryTableMatchesMap(t *testing.T) {
	seeds := uint64(40)
	if raceDetector { // ten times slower: the races are the other tests' to find
		seeds = 8
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		var tab Table
		ref := map[uint64]*Entry{}
		// A small universe of hashes, most sharing low bits and tags.
		universe := make([]uint64, 300)
		for i := range universe {
			switch rng.IntN(4) {
			case 0:
				universe[i] = rng.Uint64()
			case 1:
				universe[i] = rng.Uint64()&^0xFFFF | uint64(rng.IntN(4)) // few home slots
			case 2:
				universe[i] = uint64(rng.IntN(1<<20))<<20 | 0xF0000000000000 | 0xFFFF // same tag, homes at the end
			default:
				universe[i] = uint64(i) // small: 0 and neighbours
			}
		}
		for step := 0; step < 3000; step++ {
			h := universe[rng.IntN(len(universe))]
			switch r := rng.IntN(10); {
			case r < 5:
				if ref[tableHash(h)] == nil && len(ref) < 250 {
					e := tab.Insert(h)
					e.Last = int64(step)
					e.Unlock()
					ref[tableHash(h)] = e
				}
			case r < 8:
				if e := ref[tableHash(h)]; e != nil {
					tab.Delete(e)
					delete(ref, tableHash(h))
				}
			case r == 8: // a sweep deleting about half
				tab.Each(rng.Uint32(), func(e *Entry) bool {
					if rng.IntN(2) == 0 {
						delete(ref, e.h)
						tab.Delete(e)
					}
					return true
				})
			default: // a sample that stops early
				n := 0
				tab.Each(rng.Uint32(), func(e *Entry) bool {
					if ref[e.h] != e {
						t.Fatalf("seed %d step %d: each gave an Entry not in the map", seed, step)
					}
					n++
					return n < 8
				})
			}
			if tab.n != len(ref) {
				t.Fatalf("seed %d step %d: %d entries, map has %d", seed, step, tab.n, len(ref))
			}
			for _, u := range universe {
				want := ref[tableHash(u)]
				if got := tab.Get(u); got != want {
					t.Fatalf("seed %d step %d: get(%#x) = %p, want %p", seed, step, u, got, want)
				}
				got := tab.Lookup(u) // without the shard's lock: the same answer when no writer runs
				if got != want {
					t.Fatalf("seed %d step %d: lookup(%#x) = %p, want %p", seed, step, u, got, want)
				}
				if got != nil {
					got.Unlock()
				}
			}
			seen := 0
			tab.Each(0, func(e *Entry) bool { seen++; return true })
			if seen != len(ref) {
				t.Fatalf("seed %d step %d: each saw %d entries, want %d", seed, step, seen, len(ref))
			}
			if tab.slotCount() > 0 && tab.n*4 > tab.slotCount()*3 {
				t.Fatalf("seed %d step %d: index over 3/4 full", seed, step)
			}
		}
	}
}

// TestEntryTableAddressesStable: an entry's address survives growth, so
// the store may hold two entries while a second lookup inserts.
func TestEntryTableAddressesStable(t *testing.T) {
	var tab Table
	first := tab.Insert(42)
	first.Last = 7
	first.Unlock()
	for h := uint64(100); h < 100_000; h++ {
		tab.Insert(h * 0x9E3779B97F4A7C15).Unlock()
	}
	if got := tab.Get(42); got != first || got.Last != 7 {
		t.Fatalf("Entry moved or changed: %p %+v, want %p", got, got, first)
	}
	// Freed places are reused before new chunks are made.
	chunks := len(tab.chunks)
	for h := uint64(100); h < 1_100; h++ {
		tab.Delete(tab.Get(h * 0x9E3779B97F4A7C15))
	}
	for h := uint64(1); h <= 1_000; h++ {
		tab.Insert(h << 40).Unlock()
	}
	if len(tab.chunks) != chunks {
		t.Fatalf("%d chunks after reuse, want %d", len(tab.chunks), chunks)
	}
}

func TestShardsFillCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(Shard{}); n%64 != 0 {
		t.Fatalf("Shard is %d bytes, not a multiple of 64", n)
	}
}

// TestEntrySize: an Entry stays 56 bytes (BENCHMARKS.md's memory figures
// rest on it); the mark (solo flag, seconds until full) lives in what was
// padding.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(Entry{}); n != 56 {
		t.Fatalf("Entry is %d bytes, want 56", n)
	}
}

// TestEntryTableLookupRacesWriters: lock-free lookups of crowded hashes
// (shared home slots, shared tags) while a writer inserts, deletes (each
// Delete shifting its probe run back) and grows the table under its lock.
// A lookup may miss an Entry a writer is moving, but never returns another
// hash's entry; once the writer stops, every resident Entry is found.
// Run under -race: the index and chunks are published atomically.
func TestEntryTableLookupRacesWriters(t *testing.T) {
	crowded := func(rng *rand.Rand) uint64 {
		// Tag 0xAB for half, home among 8 slots for all.
		h := rng.Uint64()&^0x00FF_0000_0000_0007 | uint64(rng.IntN(8))
		if rng.IntN(2) == 0 {
			h |= 0xAB << 48
		}
		return h
	}
	var tab Table
	var mu sync.Mutex // the shard's lock
	rng := rand.New(rand.NewPCG(5, 8))
	residents := make([]uint64, 64)
	mu.Lock()
	for i := range residents {
		h := crowded(rng)
		for tab.Get(h) != nil {
			h = crowded(rng)
		}
		residents[i] = h
		e := tab.Insert(h)
		e.Last = int64(h) // the payload tells whose Entry it is
		e.Unlock()
	}
	mu.Unlock()
	churn := make([]uint64, 400)
	for i := range churn {
		churn[i] = crowded(rng)
	}
	var done atomic.Bool
	var misses, found atomic.Int64
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for !done.Load() {
				resident := rng.IntN(2) == 0
				h := churn[rng.IntN(len(churn))]
				if resident {
					h = residents[rng.IntN(len(residents))]
				}
				e := tab.Lookup(h)
				if e == nil {
					if resident {
						misses.Add(1)
					}
					continue
				}
				if e.h != tableHash(h) || e.Last != int64(h) {
					t.Errorf("lookup(%#x) returned the Entry of %#x (payload %#x)", h, e.h, e.Last)
				}
				found.Add(1)
				e.Unlock()
			}
		}()
	}
	for step := range 100_000 {
		h := churn[rng.IntN(len(churn))]
		mu.Lock()
		if e := tab.Get(h); e != nil {
			if !slices.Contains(residents, h) {
				e.Lock()
				tab.Delete(e)
				e.Unlock()
			}
		} else if step%7 != 0 {
			e := tab.Insert(h)
			e.Last = int64(h)
			e.Unlock()
		}
		mu.Unlock()
	}
	done.Store(true)
	wg.Wait()
	for _, h := range residents {
		e := tab.Lookup(h)
		if e == nil {
			t.Fatalf("resident %#x not found once the writer stopped", h)
		}
		e.Unlock()
	}
	t.Logf("%d lookups found their Entry, %d resident lookups missed while the writer ran", found.Load(), misses.Load())
}
