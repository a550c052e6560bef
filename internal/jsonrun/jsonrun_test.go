package jsonrun

import (
	"math/rand/v2"
	"testing"
)

// TestPlainMatchesByteAtATime: the eight-bytes-per-step scan stops exactly
// where a byte-at-a-time scan for '"', '\\' or a control byte does, wherever
// in a word the first such byte falls, and never stops early on bytes
// 0x20–0xFF that merely resemble one (0xA2, 0xDC, 0x80…).
func TestPlainMatchesByteAtATime(t *testing.T) {
	alphabet := []byte{'"', '\\', 0x00, 0x1f, 0x20, 'a', 0x7f, 0x80, 0xa2, 0xdc, 0x9f, 0xff, 0x21, 0x5b, 0x5d}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(8) == 0 {
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
