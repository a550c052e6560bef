package llmrate

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestEntryTableMatchesMap drives the table and a Go map with the same
// random inserts, lookups, deletes and sweeps, with hashes chosen to crowd
// the index (shared home slots, shared tags, runs that wrap around the end,
// the hash 0), and checks after every step that both hold the same entries
// and that every entry is found where it should be.
func TestEntryTableMatchesMap(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		var tab entryTable
		ref := map[uint64]*entry{}
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
					e := tab.insert(h)
					e.last = int64(step)
					e.unlock()
					ref[tableHash(h)] = e
				}
			case r < 8:
				if e := ref[tableHash(h)]; e != nil {
					tab.delete(e)
					delete(ref, tableHash(h))
				}
			case r == 8: // a sweep deleting about half
				tab.each(rng.Uint32(), func(e *entry) bool {
					if rng.IntN(2) == 0 {
						delete(ref, e.h)
						tab.delete(e)
					}
					return true
				})
			default: // a sample that stops early
				n := 0
				tab.each(rng.Uint32(), func(e *entry) bool {
					if ref[e.h] != e {
						t.Fatalf("seed %d step %d: each gave an entry not in the map", seed, step)
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
				if got := tab.get(u); got != want {
					t.Fatalf("seed %d step %d: get(%#x) = %p, want %p", seed, step, u, got, want)
				}
				got := tab.lookup(u) // without the shard's lock: the same answer when no writer runs
				if got != want {
					t.Fatalf("seed %d step %d: lookup(%#x) = %p, want %p", seed, step, u, got, want)
				}
				if got != nil {
					got.unlock()
				}
			}
			seen := 0
			tab.each(0, func(e *entry) bool { seen++; return true })
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
	var tab entryTable
	first := tab.insert(42)
	first.last = 7
	first.unlock()
	for h := uint64(100); h < 100_000; h++ {
		tab.insert(h * 0x9E3779B97F4A7C15).unlock()
	}
	if got := tab.get(42); got != first || got.last != 7 {
		t.Fatalf("entry moved or changed: %p %+v, want %p", got, got, first)
	}
	// Freed places are reused before new chunks are made.
	chunks := len(tab.chunks)
	for h := uint64(100); h < 1_100; h++ {
		tab.delete(tab.get(h * 0x9E3779B97F4A7C15))
	}
	for h := uint64(1); h <= 1_000; h++ {
		tab.insert(h << 40).unlock()
	}
	if len(tab.chunks) != chunks {
		t.Fatalf("%d chunks after reuse, want %d", len(tab.chunks), chunks)
	}
}

func TestShardsFillCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(memShard{}); n%64 != 0 {
		t.Fatalf("memShard is %d bytes, not a multiple of 64", n)
	}
}

// TestEntrySize: an entry stays 56 bytes (BENCHMARKS.md's memory figures
// rest on it); the mark (solo flag, seconds until full) lives in what was
// padding.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 56 {
		t.Fatalf("entry is %d bytes, want 56", n)
	}
}
