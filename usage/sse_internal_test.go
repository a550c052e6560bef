package usage

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEventEnd(t *testing.T) {
	cases := map[string]int{
		"data: a\n\nrest":     9,
		"data: a\r\n\r\nrest": 11,
		"data: a\r\rrest":     9,
		"data: a\n":           -1,
		"data: a\r":           -1,
		"data: a\r\n\r":       -1, // the last CR may start a CRLF
		"\nx":                 1,
	}
	for in, want := range cases {
		assert.Equal(t, want, eventEnd([]byte(in)), "%q", in)
		assert.Equal(t, want, fastEventEnd([]byte(in)), "fast %q", in)
	}
	// The two agree on every input: random streams of the bytes that matter.
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "\r\nd:x"[r.IntN(5)]
		}
		require.Equal(t, eventEnd(b), fastEventEnd(b), "%q", b)
	}
}

// TestEndSearchAcrossWrites: the Filter's resumable search finds the end
// eventEnd finds in the whole, however the bytes are split into writes.
func TestEndSearchAcrossWrites(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 50000 {
		b := make([]byte, r.IntN(16))
		for i := range b {
			b[i] = "\r\nd:x"[r.IntN(5)]
		}
		want := eventEnd(b)
		var e endSearch
		got, off := -1, 0
		for rest := b; ; {
			n := min(len(rest), r.IntN(4))
			if end := e.next(rest[:n]); end >= 0 {
				got = off + end
				break
			}
			off += n
			rest = rest[n:]
			if len(rest) == 0 {
				break
			}
		}
		require.Equal(t, want, got, "%q", b)
	}
}
