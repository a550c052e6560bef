// Package jsonrun finds the plain content at the start of a JSON string's
// body: the one scanning rule the root's model-field reader and package
// usage's JSON scanner share.
package jsonrun

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080

	// probe is how many bytes Plain tests a word at a time before it
	// takes a string for long: member names and short values end within.
	probe = 64
	// window bounds the first long step, so a long string broken by many
	// escapes is still read in linear time; each step that finds no stop
	// doubles the next, up to maxWindow, so a long plain run takes few.
	window    = 256
	maxWindow = 4096
)

// Stops returns the flag bits of eight string bytes read as a
// little-endian word: set at bytes that are a quote, a backslash or below
// 0x20; the lowest flag is always exact (a borrow only flags bytes above a
// true stop). It inlines, for callers that test a first word before
// calling Plain.
//
// The quote and the control bytes are one test: x^0x02 maps 0x00–0x1f
// onto itself and '"' (0x22) to 0x20, every other byte to 0x21 or above,
// so they are the bytes of y below 0x21.
func Stops(x uint64) uint64 {
	y := x ^ (ones * 0x02)
	s := x ^ (ones * '\\')
	return (((y - ones*0x21) &^ y) | ((s - ones) &^ s)) & highs
}

// Plain returns how many leading bytes of b are plain string content: not
// '"', not '\\', not a control byte. It tests the first probe bytes eight
// at a time (SWAR); past them the string is long, and it finds the next
// backslash with the runtime's vectorised bytes.IndexByte, then the first
// quote or control byte before it 64 bytes a step (one SWAR test for both,
// as in Stops), in steps of 256 bytes that double while they find no stop.
func Plain(b []byte) int {
	n := min(len(b), probe)
	i := 0
	for ; i+8 <= n; i += 8 {
		if m := Stops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	if n < probe {
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
				break
			}
		}
		return i
	}
	for step := window; i < len(b); step = min(2*step, maxWindow) {
		w := b[i:min(len(b), i+step)]
		end := len(w)
		if k := bytes.IndexByte(w, '\\'); k >= 0 {
			end = k
		}
		if c := firstQuoteOrControl(w[:end]); c < end || end < len(w) {
			return i + c
		}
		i += len(w)
	}
	return i
}

// firstQuoteOrControl returns the index of the first '"' or byte below
// 0x20 of s, or len(s).
func firstQuoteOrControl(s []byte) int {
	i := 0
	for t := s; len(t) >= 64; t = t[64:] {
		// eight words' flags, the mask applied once to their union
		w := t[:64:64]
		c := qc(w[0:]) | qc(w[8:]) | qc(w[16:]) | qc(w[24:]) | qc(w[32:]) | qc(w[40:]) | qc(w[48:]) | qc(w[56:])
		if c&highs != 0 {
			break
		}
		i += 64
	}
	for ; i+8 <= len(s); i += 8 {
		if m := qc(s[i:]) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == '"' || c < 0x20 {
			return i
		}
	}
	return i
}

// qc is Stops's quote-and-control test of the word at b[0:8], before its
// mask: the union of several words' qc, masked once, flags a stop in one
// of them; one word's masked qc has its lowest flag exact.
func qc(b []byte) uint64 {
	y := binary.LittleEndian.Uint64(b) ^ (ones * 0x02)
	return (y - ones*0x21) &^ y
}
