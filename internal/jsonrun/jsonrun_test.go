package jsonrun

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestPlainMatchesByteAtATime: the eight-bytes-per-step scan stops exactly
// where a byte-at-a-time scan for '"', '\\' or a control byte does, wherever
// in a word the first such byte falls, and never stops early on bytes
// 0x20–0xFF that merely resemble one (0xA2, 0xDC, 0x80…).
//
// Long strings check the vectorised path: its windows, and a quote, a
// backslash or a control byte anywhere in them.
func TestPlainMatchesByteAtATime(t *testing.T) {
	alphabet := []byte{'"', '\\', 0x00, 0x1f, 0x20, 'a', 0x7f, 0x80, 0xa2, 0xdc, 0x9f, 0xff, 0x21, 0x5b, 0x5d}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 20_000 {
		// Mostly short strings; one in four long (past the probe and
		// across windows), with stops rarer, some none at all.
		size, rare := r.IntN(40), 8
		if n%4 == 0 {
			size, rare = r.IntN(3000), 1+r.IntN(4000)
		}
		b := make([]byte, size)
		for i := range b {
			if r.IntN(rare) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = alphabet[4+r.IntN(len(alphabet)-4)]
			}
		}
		want := len(b)
		for i, c := range b {
			if c == '"' || c == '\\' || c < 0x20 {
				want = i
				break
			}
		}
		if got := Plain(b); got != want {
			t.Fatalf("Plain(%q) = %d, want %d", b, got, want)
		}
	}
}

// TestPlainAtEveryWindowEdge: one stop (a quote, a backslash, a
// control byte) placed at every position around each of Plain's step
// edges (the probe's 64 bytes, then steps of 256, 512, ... 4096 bytes,
// which TestPlainMatchesByteAtATime's strings of at most 3,000 bytes do
// not all reach), among bytes that merely resemble one, and strings with
// no stop at all of every length around those edges.
func TestPlainAtEveryWindowEdge(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	look := []byte{0x20, 'a', 0x7f, 0x80, 0xa2, 0xdc, 0x9f, 0xff, 0x21, 0x5b, 0x5d, 0xa0, 0xbc, 0xe0}
	edges := []int{64}
	for e, step := 64, 256; e < 20_000; step = min(2*step, 4096) {
		e += step
		edges = append(edges, e)
	}
	const size = 20_000
	b := make([]byte, size)
	for i := range b {
		b[i] = look[r.IntN(len(look))]
	}
	for _, e := range edges {
		for pos := max(0, e-72); pos < min(size, e+72); pos++ {
			for _, stop := range []byte{'"', '\\', 0x00, 0x1f, 0x0a} {
				old := b[pos]
				b[pos] = stop
				if got := Plain(b); got != pos {
					t.Fatalf("stop %#x at %d (edge %d): Plain = %d", stop, pos, e, got)
				}
				// A string that ends right after the edge, and one that ends
				// at the stop's place.
				if got := Plain(b[:pos]); got != pos {
					t.Fatalf("no stop in %d bytes: Plain = %d", pos, got)
				}
				b[pos] = old
			}
		}
	}
	if got := Plain(b); got != size {
		t.Fatalf("no stop in %d bytes: Plain = %d", size, got)
	}
}

// TestStopsLowestFlag: Stops's lowest flag is the first quote, backslash
// or control byte of a word, for every pair of byte values at every pair
// of positions, the rest of the word plain.
func TestStopsLowestFlag(t *testing.T) {
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			for a := range 256 {
				for b := range 256 {
					var w [8]byte
					for k := range w {
						w[k] = 'a'
					}
					w[i], w[j] = byte(a), byte(b)
					want := 8
					for k, c := range w {
						if c == '"' || c == '\\' || c < 0x20 {
							want = k
							break
						}
					}
					got := 8
					if m := Stops(binary.LittleEndian.Uint64(w[:])); m != 0 {
						got = bits.TrailingZeros64(m) / 8
					}
					if got != want {
						t.Fatalf("Stops(%q): first stop %d, want %d", w, got, want)
					}
				}
			}
		}
	}
}
