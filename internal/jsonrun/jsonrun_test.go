package jsonrun

import (
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
