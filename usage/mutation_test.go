package usage_test

import (
	"math/rand/v2"
	"testing"
)

// TestUsageSSEMutations: seeded random mutations of the SSE fixtures (byte
// flips, inserted line breaks and JSON punctuation, deletions, duplicated
// runs) agree with the encoding/json reference in every split, usage and
// generated text alike. It checks the same property as FuzzUsageSSE without
// the fuzzing engine, whose worker can stall on this target (RELIABILITY.md
// at the module root).
func TestUsageSSEMutations(t *testing.T) {
	t.Parallel()
	var seeds [][]byte
	for _, fx := range loadFixtures(t) {
		if fx.ContentType == "text/event-stream" && fx.ContentEncoding == "" {
			if b := readFixture(t, fx); len(b) <= 4<<10 {
				seeds = append(seeds, b)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for range 5000 {
		b := append([]byte(nil), seeds[r.IntN(len(seeds))]...)
		for range 1 + r.IntN(20) {
			switch r.IntN(4) {
			case 0:
				if len(b) > 0 {
					b[r.IntN(len(b))] = byte(r.IntN(256))
				}
			case 1:
				i := r.IntN(len(b) + 1)
				b = append(b[:i], append([]byte{"\r\n{}[\"\\:,"[r.IntN(9)]}, b[i:]...)...)
			case 2:
				if len(b) > 1 {
					i := r.IntN(len(b))
					b = append(b[:i], b[i+1:]...)
				}
			case 3:
				i, j := r.IntN(len(b)+1), r.IntN(len(b)+1)
				if i > j {
					i, j = j, i
				}
				b = append(b[:j], append(append([]byte(nil), b[i:j]...), b[j:]...)...)
			}
		}
		checkAgainstRef(t, "text/event-stream", b, uint8(r.IntN(256)))
	}
}
