// Package jsonrun finds the plain content at the start of a JSON string's
// body: the one scanning rule the root's model-field reader and package
// usage's JSON scanner share.
package jsonrun

import (
	"encoding/binary"
	"math/bits"
)

// Plain returns how many leading bytes of b are plain string content: not
// '"', not '\\', not a control byte. It tests eight bytes per step (SWAR):
// a word's flag bits are set at bytes that are a quote, a backslash or
// below 0x20, and the lowest flag is always exact.
func Plain(b []byte) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (ones * '"')
		s := x ^ (ones * '\\')
		m := ((q - ones) &^ q) | ((s - ones) &^ s) | ((x - ones*0x20) &^ x)
		if m &= highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			break
		}
	}
	return i
}
