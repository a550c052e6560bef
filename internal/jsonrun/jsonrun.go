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
// 0x20; the lowest flag is always exact. It inlines, for callers that test
// a first word before calling Plain.
func Stops(x uint64) uint64 {
	q := x ^ (ones * '"')
	s := x ^ (ones * '\\')
	return (((q - ones) &^ q) | ((s - ones) &^ s) | ((x - ones*0x20) &^ x)) & highs
}

// controls returns a word's flag bits for bytes below 0x20.
func controls(x uint64) uint64 { return ((x - ones*0x20) &^ x) & highs }

// Plain returns how many leading bytes of b are plain string content: not
// '"', not '\\', not a control byte. It tests the first probe bytes eight
// at a time (SWAR); past them the string is long, and it finds the next
// quote and backslash with the runtime's vectorised bytes.IndexByte, then
// tests the run before them for control bytes 64 bytes a step, in steps
// of 256 bytes that double while they find no stop.
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
		if q := bytes.IndexByte(w, '"'); q >= 0 {
			end = q
		}
		if k := bytes.IndexByte(w[:end], '\\'); k >= 0 {
			end = k
		}
		if c := firstControl(w[:end]); c < end || end < len(w) {
			return i + c
		}
		i += len(w)
	}
	return i
}

// firstControl returns the index of the first byte of s below 0x20, or
// len(s).
func firstControl(s []byte) int {
	i := 0
	for t := s; len(t) >= 64; t = t[64:] {
		// controls of eight words, the mask applied once to their union
		w := t[:64:64]
		c := ctl(w[0:]) | ctl(w[8:]) | ctl(w[16:]) | ctl(w[24:]) | ctl(w[32:]) | ctl(w[40:]) | ctl(w[48:]) | ctl(w[56:])
		if c&highs != 0 {
			break
		}
		i += 64
	}
	for ; i+8 <= len(s); i += 8 {
		if m := controls(binary.LittleEndian.Uint64(s[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if s[i] < 0x20 {
			return i
		}
	}
	return i
}

// ctl is controls before its mask: the union of several words' ctl,
// masked once, is the union of their controls.
func ctl(b []byte) uint64 {
	x := binary.LittleEndian.Uint64(b)
	return (x - ones*0x20) &^ x
}
